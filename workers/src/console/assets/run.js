// Baton console, the run page: the event log's filter by kind. (The log
// itself opens and closes as a <details>; console.js pauses the page's
// refresh while it is open.)
(function () {
  "use strict";
  var select = document.getElementById("event-kind");
  if (!select) return;
  select.addEventListener("change", function () {
    var kind = select.value;
    document.querySelectorAll("#timeline li.event").forEach(function (row) {
      row.hidden = kind !== "" && row.getAttribute("data-kind") !== kind;
    });
  });
})();
