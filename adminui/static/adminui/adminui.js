// adminui: small progressive enhancements. Every page works without this file; the server
// checks everything again (a breaking move without the box is refused by label_move).
(function () {
  "use strict";

  // A breaking move: the confirm button stays disabled until "Allow this breaking change" is ticked.
  function guardBreakingMove() {
    var box = document.getElementById("allow-breaking");
    var button = document.getElementById("confirm");
    if (!box || !button) return;
    var hint = document.getElementById("confirm-needs-box");
    function sync() {
      button.disabled = !box.checked;
      if (hint) hint.hidden = box.checked;
    }
    box.addEventListener("change", sync);
    sync();
  }

  // After a failed save, focus goes to the summary of the errors, so keyboard and screen
  // reader users start there (it is focusable with tabindex="-1" and lists each field).
  function focusErrorSummary() {
    var summary = document.getElementById("error-summary");
    if (summary) summary.focus();
  }

  // Leaving a form with unsaved edits asks first; submitting it does not. A form that came
  // back with errors (data-unsaved) holds text the server did not save, so it counts as edited.
  function warnAboutUnsavedEdits() {
    var forms = document.querySelectorAll("form[data-warn-unsaved]");
    if (!forms.length) return;
    var dirty = false;
    var submitting = false;
    Array.prototype.forEach.call(forms, function (form) {
      if (form.hasAttribute("data-unsaved")) dirty = true;
      form.addEventListener("input", function () { dirty = true; });
      form.addEventListener("change", function () { dirty = true; });
      form.addEventListener("submit", function () { submitting = true; });
    });
    window.addEventListener("beforeunload", function (event) {
      if (!dirty || submitting) return undefined;
      event.preventDefault();
      event.returnValue = "";  // older browsers show the prompt only when this is set
      return "";
    });
  }

  // "Copy as curl": copies the text of the element named by data-copy (shown anyway, so
  // without this script it can be selected by hand).
  function copyButtons() {
    Array.prototype.forEach.call(document.querySelectorAll("button[data-copy]"), function (button) {
      var source = document.getElementById(button.getAttribute("data-copy"));
      if (!source || !navigator.clipboard) return;
      button.hidden = false;
      button.addEventListener("click", function () {
        var done = document.getElementById(button.id + "-done");
        navigator.clipboard.writeText(source.textContent).then(function () {
          if (done) done.textContent = "Copied.";
        }, function () {
          if (done) done.textContent = "The browser refused; select the command above.";
        });
      });
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    copyButtons();
    guardBreakingMove();
    focusErrorSummary();
    warnAboutUnsavedEdits();
  });
})();
