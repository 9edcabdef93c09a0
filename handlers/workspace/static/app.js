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
