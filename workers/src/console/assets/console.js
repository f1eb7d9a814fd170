// Baton console: copy to clipboard, confirmations, and refreshing pages that show live work.
(function () {
  "use strict";
  document.addEventListener("click", function (event) {
    var button = event.target.closest("[data-copy]");
    if (!button) return;
    var source = document.getElementById(button.getAttribute("data-copy"));
    if (!source) return;
    var text = source.textContent;
    var done = function () { button.textContent = "Copied"; setTimeout(function () { button.textContent = "Copy prompt"; }, 1500); };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, function () { fallback(text); done(); });
    } else { fallback(text); done(); }
  });
  function fallback(text) {
    var area = document.createElement("textarea");
    area.value = text; area.setAttribute("readonly", ""); area.style.position = "fixed"; area.style.opacity = "0";
    document.body.appendChild(area); area.select();
    try { document.execCommand("copy"); } catch (e) { /* nothing more to try */ }
    document.body.removeChild(area);
  }
  document.addEventListener("submit", function (event) {
    var message = event.target.getAttribute("data-confirm");
    if (message && !window.confirm(message)) event.preventDefault();
  });
  // Pages with live work reload themselves, unless the operator is typing or has opened something.
  var live = document.querySelector("[data-refresh]");
  if (live) {
    var seconds = parseInt(live.getAttribute("data-refresh"), 10) || 5;
    setInterval(function () {
      var busy = document.activeElement && /INPUT|TEXTAREA|SELECT/.test(document.activeElement.tagName);
      var opened = document.querySelector("details[open]");
      if (!busy && !opened && !document.hidden) window.location.reload();
    }, seconds * 1000);
  }
})();
