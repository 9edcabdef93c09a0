// Copy buttons: <button class="copy" data-copy="ID"> copies the text of the
// element with that id. Everything else in the workspace works without script.
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
