// Copy buttons: <button class="copy" data-copy="ID"> copies the text of the
// element with that id. Pages work without script, except the Rules editor;
// script only spares a reload.
document.addEventListener("click", function (event) {
  var button = event.target.closest("button[data-copy]");
  if (!button) return;
  var source = document.getElementById(button.getAttribute("data-copy"));
  if (!source) return;
  var text = source.textContent.trim();
  var done = function () {
    button.textContent = "Copied";
    button.classList.add("copied");
    setTimeout(function () {
      button.textContent = "Copy";
      button.classList.remove("copied");
    }, 2000);
  };
  var fallback = function () {
    // Older browsers, and pages not served over https or from localhost.
    var range = document.createRange();
    range.selectNodeContents(source);
    var selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
    if (document.execCommand("copy")) done();
    else button.textContent = "Select and copy by hand";
  };
  if (navigator.clipboard && window.isSecureContext) {
    navigator.clipboard.writeText(text).then(done, fallback);
  } else {
    fallback();
  }
});

// Retry on the Posts page: the form is sent in the background and the post's
// row is replaced by the server's, then followed until the post ends, so
// the outcome shows without leaving the page. Without script the form posts
// and the list comes back.
(function () {
  var FOLLOW_MS = 1000, FOLLOW_TRIES = 120;

  function replaceRow(id, html, message) {
    var row = document.getElementById("post-" + id);
    if (!row) return;
    var holder = document.createElement("tbody");
    holder.innerHTML = html;
    var fresh = holder.firstElementChild;
    if (message) fresh.querySelector(".retry-outcome").textContent = message;
    row.replaceWith(fresh);
  }

  function say(id, message) {
    var row = document.getElementById("post-" + id);
    if (row) row.querySelector(".retry-outcome").textContent = message;
  }

  function follow(id, tries) {
    setTimeout(function () {
      fetch("/workspace/posts/" + encodeURIComponent(id) + "/row", {
        headers: { Accept: "application/json" }, credentials: "same-origin"
      }).then(function (r) { return r.json(); }).then(function (answer) {
        if (!answer.html) return say(id, answer.message || "The post could not be read.");
        if (answer.final) return replaceRow(id, answer.html, "Done: the post is " + answer.status.replace(/_/g, " ") + ".");
        replaceRow(id, answer.html, "Publishing the failed targets again…");
        if (tries > 1) follow(id, tries - 1);
        else say(id, "Still publishing; reload the page later to see how it ends.");
      }, function () {
        say(id, "The workspace could not be reached; reload the page to see how the post is doing.");
      });
    }, FOLLOW_MS);
  }

  document.addEventListener("submit", function (event) {
    var form = event.target.closest("form[data-retry]");
    if (!form || !window.fetch) return;
    event.preventDefault();
    var id = form.getAttribute("data-retry");
    var button = form.querySelector("button");
    button.disabled = true;
    say(id, "Asking…");
    fetch(form.action, {
      method: "POST", body: new URLSearchParams(new FormData(form)), credentials: "same-origin",
      headers: { Accept: "application/json" }
    }).then(function (r) {
      if (r.status === 403) throw new Error("This page has expired; reload it and try again.");
      return r.json();
    }).then(function (answer) {
      if (!answer.html) return say(id, answer.message);
      replaceRow(id, answer.html, answer.message);
      if (!answer.final) follow(id, FOLLOW_TRIES);
    }).catch(function (e) {
      button.disabled = false;
      say(id, e.message && e.message.indexOf("expired") >= 0 ? e.message : "The retry could not be sent; try again.");
    });
  });
})();

// Sends a workspace form in the background as the page's script does
// (Accept: JSON); resolves with [status, answer]. An expired page (403, an
// HTML page) rejects with a message that says what to do.
function sendForm(form, extra) {
  var body = new URLSearchParams(new FormData(form));
  Object.keys(extra || {}).forEach(function (k) { body.set(k, extra[k]); });
  // getAttribute: a field named "action" hides the form's action property.
  return fetch(form.getAttribute("action"), {
    method: "POST", body: body, credentials: "same-origin", headers: { Accept: "application/json" }
  }).then(function (r) {
    if (r.status === 403) throw new Error("This page has expired; reload it and try again.");
    return r.json().then(function (answer) { return [r.status, answer]; });
  }, function () {
    throw new Error("The workspace could not be reached; try again.");
  });
}

// Reply, Hide, Unhide and Delete on the Comments page: the form is sent in
// the background, the comment's row is replaced by the server's and then
// followed until the operation ends, so the outcome shows without a reload.
// Without script the form posts and the list comes back.
(function () {
  var FOLLOW_MS = 500, FOLLOW_TRIES = 240;

  function say(id, message) {
    var row = document.getElementById("comment-" + id);
    if (row) row.querySelector(".moderate-outcome").textContent = message;
  }

  function replaceRow(id, html, message) {
    var row = document.getElementById("comment-" + id);
    if (!row) return;
    var holder = document.createElement("ul");
    holder.innerHTML = html;
    row.replaceWith(holder.firstElementChild);
    say(id, message);
  }

  function follow(id, operation, tries) {
    setTimeout(function () {
      fetch("/workspace/comments/" + encodeURIComponent(id) + "/row?operation=" + encodeURIComponent(operation), {
        headers: { Accept: "application/json" }, credentials: "same-origin"
      }).then(function (r) { return r.json(); }).then(function (answer) {
        if (!answer.html) return say(id, answer.message);
        replaceRow(id, answer.html, answer.message);
        if (answer.final) return;
        if (tries > 1) follow(id, operation, tries - 1);
        else say(id, "Still waiting for the platform; reload the page later to see how it ends.");
      }, function () {
        say(id, "The workspace could not be reached; reload the page to see how it ended.");
      });
    }, FOLLOW_MS);
  }

  document.addEventListener("submit", function (event) {
    var form = event.target.closest("form[data-moderate]");
    if (!form || !window.fetch) return;
    event.preventDefault();
    var question = form.getAttribute("data-confirm");
    if (question && !window.confirm(question)) return;
    var id = form.getAttribute("data-moderate");
    var button = form.querySelector("button");
    button.disabled = true;
    say(id, "Asking…");
    sendForm(form).then(function (result) {
      var answer = result[1];
      if (!answer.html) {
        button.disabled = false;
        return say(id, answer.message);
      }
      replaceRow(id, answer.html, answer.message);
      follow(id, answer.operationId, FOLLOW_TRIES);
    }).catch(function (e) {
      button.disabled = false;
      say(id, e.message);
    });
  });
})();

// The Rules page's editor: the rules (JSON in the page) become a form per
// rule; Save sends the whole list, and the server's errors appear next to
// the fields their JSON Pointers name. The Test box asks the server which
// saved rule would act. Built with DOM calls only: rule text is never HTML.
(function () {
  var editor = document.getElementById("rules-editor");
  if (!editor || !window.fetch) return;
  var list = document.getElementById("rules");
  var accounts = JSON.parse(editor.getAttribute("data-accounts"));
  var ACTIONS = [["hide", "Hide it"], ["delete", "Delete it"], ["flag", "Flag it (an event only)"]];
  var FLAGS = [["links", "Has a link"], ["emails", "Has an email address"], ["phones", "Has a phone number"]];
  var PLATFORMS = [["facebook", "Facebook"], ["instagram", "Instagram"]];
  var KNOWN = ["keywords", "regex", "links", "emails", "phones", "authors", "minLength", "maxLength"];
  var serial = 0;

  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) {
      if (k === "text") node.textContent = attrs[k];
      else if (k === "className") node.className = attrs[k];
      else node.setAttribute(k, attrs[k]);
    });
    (children || []).forEach(function (c) { if (c) node.appendChild(c); });
    return node;
  }

  function field(label, input, pointer) {
    input.id = input.id || "f" + (++serial);
    input.setAttribute("data-pointer", pointer);
    return el("div", { className: "field" }, [el("label", { "for": input.id, text: label }), input]);
  }

  function text(value, cls, attrs) {
    var input = el("input", Object.assign({ type: "text", className: cls }, attrs || {}));
    input.value = value == null ? "" : String(value);
    return input;
  }

  function check(label, cls, checked, value, pointer) {
    var input = el("input", { type: "checkbox", className: cls, value: value || "on" });
    input.checked = !!checked;
    if (pointer) input.setAttribute("data-pointer", pointer);
    return el("label", { className: "check" }, [input, document.createTextNode(label)]);
  }

  function ruleItem(rule) {
    var match = rule.match || {};
    var scope = rule.scope || {};
    var item = el("li", { className: "rule" });
    item._id = rule.id;
    // Match kinds this editor has no field for are kept as they are.
    item._extra = {};
    Object.keys(match).forEach(function (k) { if (KNOWN.indexOf(k) < 0) item._extra[k] = match[k]; });

    var action = el("select", { className: "rule-action" });
    ACTIONS.forEach(function (a) {
      var o = el("option", { value: a[0], text: a[1] });
      o.selected = rule.action === a[0];
      action.appendChild(o);
    });
    var head = el("div", { className: "rule-head" }, [
      el("span", { className: "rule-number" }),
      field("Name", text(rule.name, "rule-name", { maxlength: "200", placeholder: "What this rule is for" }), "/name"),
      check("Enabled", "rule-enabled", rule.enabled !== false, null, "/enabled"),
      el("div", { className: "rule-buttons" }, [
        el("button", { type: "button", className: "small secondary rule-up", text: "Up", "aria-label": "Move up" }),
        el("button", { type: "button", className: "small secondary rule-down", text: "Down", "aria-label": "Move down" }),
        el("button", { type: "button", className: "small danger rule-delete", text: "Delete" })])]);
    var lists = function (v) { return Array.isArray(v) ? v.join(", ") : ""; };
    var matchSet = el("fieldset", { "data-pointer": "/match" }, [el("legend", { text: "When the comment…" }),
      el("div", { className: "rule-grid" }, [
        field("Has any of the words", text(lists(match.keywords), "rule-keywords",
          { placeholder: "comma-separated: refund, scam" }), "/match/keywords"),
        field("Matches the regex", text(match.regex, "rule-regex", { spellcheck: "false", placeholder: "e.g. \\bfree\\b" }),
          "/match/regex"),
        field("Is written by", text(lists(match.authors), "rule-authors",
          { placeholder: "author ids, comma-separated" }), "/match/authors"),
        field("Is at least", text(match.minLength, "rule-min", { inputmode: "numeric", placeholder: "characters" }),
          "/match/minLength"),
        field("Is at most", text(match.maxLength, "rule-max", { inputmode: "numeric", placeholder: "characters" }),
          "/match/maxLength")]),
      el("div", { className: "checks" }, FLAGS.map(function (f) {
        return check(f[1], "rule-" + f[0], match[f[0]] === true, null, "/match/" + f[0]);
      }))]);
    var accountChecks = accounts.map(function (a) {
      return check(a.name + " (" + a.platform + ")", "rule-account", (scope.socialAccountIds || []).indexOf(a.id) >= 0, a.id);
    });
    var scopeSet = el("fieldset", { "data-pointer": "/scope" }, [el("legend", { text: "On (none ticked: everywhere)" }),
      el("div", { className: "checks", "data-pointer": "/scope/socialAccountIds" }, accountChecks),
      el("div", { className: "checks", "data-pointer": "/scope/platforms" }, PLATFORMS.map(function (p) {
        return check(p[1] + " (any account)", "rule-platform", (scope.platforms || []).indexOf(p[0]) >= 0, p[0]);
      }))]);
    item.appendChild(head);
    item.appendChild(matchSet);
    item.appendChild(scopeSet);
    item.appendChild(field("Then", action, "/action"));
    return item;
  }

  function renumber() {
    var items = list.children;
    for (var i = 0; i < items.length; i++) {
      items[i].querySelector(".rule-number").textContent = "Rule " + (i + 1);
      items[i].querySelector(".rule-up").disabled = i === 0;
      items[i].querySelector(".rule-down").disabled = i === items.length - 1;
    }
    document.getElementById("no-rules").hidden = items.length > 0;
  }

  function show(rules) {
    list.textContent = "";
    rules.forEach(function (r) { list.appendChild(ruleItem(r)); });
    renumber();
  }

  // A comma list as an array, or undefined when it is empty.
  function words(value) {
    var out = value.split(",").map(function (s) { return s.trim(); }).filter(function (s) { return s !== ""; });
    return out.length ? out : undefined;
  }

  // A whole number as a number; anything else as typed, for the server to refuse.
  function number(value) {
    value = value.trim();
    if (value === "") return undefined;
    return /^\d+$/.test(value) ? Number(value) : value;
  }

  function ticked(item, cls) {
    var out = [];
    item.querySelectorAll("." + cls).forEach(function (c) { if (c.checked) out.push(c.value); });
    return out.length ? out : null;
  }

  function collect() {
    return Array.prototype.map.call(list.children, function (item) {
      var v = function (cls) { return item.querySelector("." + cls).value; };
      var match = Object.assign({}, item._extra, {
        keywords: words(v("rule-keywords")), regex: v("rule-regex") || undefined, authors: words(v("rule-authors")),
        minLength: number(v("rule-min")), maxLength: number(v("rule-max"))
      });
      FLAGS.forEach(function (f) { if (item.querySelector(".rule-" + f[0]).checked) match[f[0]] = true; });
      var accountIds = ticked(item, "rule-account"), platforms = ticked(item, "rule-platform");
      var rule = {
        name: v("rule-name").trim() || null, enabled: item.querySelector(".rule-enabled").checked,
        match: match, scope: accountIds || platforms ? { socialAccountIds: accountIds, platforms: platforms } : null,
        action: v("rule-action")
      };
      if (item._id) rule.id = item._id;
      return rule;
    });
  }

  function clearErrors(root) {
    root.querySelectorAll(".field-error").forEach(function (e) { e.remove(); });
    root.querySelectorAll("[aria-invalid]").forEach(function (e) { e.removeAttribute("aria-invalid"); });
  }

  // The error goes after the element whose data-pointer is the longest
  // prefix of the error's pointer (below `root`), else at the top of root.
  function place(root, pointer, message) {
    var best = null, bestLength = -1;
    root.querySelectorAll("[data-pointer]").forEach(function (node) {
      var p = node.getAttribute("data-pointer");
      if ((pointer === p || pointer.indexOf(p + "/") === 0) && p.length > bestLength) { best = node; bestLength = p.length; }
    });
    var note = el("p", { className: "field-error", "data-error-for": pointer, text: message });
    if (!best) return root.insertBefore(note, root.firstChild);
    if (/^(INPUT|SELECT|TEXTAREA)$/.test(best.tagName)) best.setAttribute("aria-invalid", "true");
    var check = best.closest("label.check");
    if (check) check.insertAdjacentElement("afterend", note);
    else (best.closest(".field") || (/^(INPUT|SELECT|TEXTAREA)$/.test(best.tagName) ? best.parentNode : best)).appendChild(note);
  }

  function showErrors(errors) {
    (errors || []).forEach(function (e) {
      var m = /^\/rules\/(\d+)(\/.*)?$/.exec(e.field);
      var item = m && list.children[Number(m[1])];
      if (item) place(item, m[2] || "", e.message);
      else place(editor, "", e.message);
    });
  }

  list.addEventListener("click", function (event) {
    var button = event.target.closest("button");
    if (!button) return;
    var item = button.closest("li.rule");
    if (button.classList.contains("rule-up") && item.previousElementSibling) list.insertBefore(item, item.previousElementSibling);
    else if (button.classList.contains("rule-down") && item.nextElementSibling) list.insertBefore(item.nextElementSibling, item);
    else if (button.classList.contains("rule-delete")) item.remove();
    renumber();
  });

  document.getElementById("add-rule").addEventListener("click", function () {
    var item = ruleItem({ enabled: true, action: "hide", match: {} });
    list.appendChild(item);
    renumber();
    item.querySelector(".rule-name").focus();
  });

  var outcome = document.getElementById("rules-outcome");
  document.getElementById("save-rules").addEventListener("submit", function (event) {
    event.preventDefault();
    clearErrors(editor);
    outcome.textContent = "Saving…";
    outcome.className = "small rules-outcome";
    sendForm(event.target, { rules: JSON.stringify(collect()) }).then(function (result) {
      var answer = result[1];
      outcome.textContent = answer.message;
      if (result[0] === 200) {
        outcome.className += " ok";
        show(answer.rules);
      } else {
        outcome.className += " failed";
        showErrors(answer.errors);
      }
    }).catch(function (e) { outcome.textContent = e.message; });
  });

  var testForm = document.getElementById("test-form"), testOutcome = document.getElementById("test-outcome");
  testForm.addEventListener("submit", function (event) {
    event.preventDefault();
    clearErrors(testForm);
    testOutcome.textContent = "Testing…";
    sendForm(testForm).then(function (result) {
      var answer = result[1];
      testOutcome.textContent = answer.message;
      testOutcome.setAttribute("data-rule", answer.ruleId || "");
      (answer.errors || []).forEach(function (e) { place(testForm, e.field, e.message); });
    }).catch(function (e) { testOutcome.textContent = e.message; });
  });

  show(JSON.parse(editor.getAttribute("data-rules")));
})();
