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

  document.addEventListener("DOMContentLoaded", function () {
    guardBreakingMove();
  });
})();
