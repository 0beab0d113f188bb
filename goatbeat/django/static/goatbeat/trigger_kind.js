// The schedule form: show the fields of the selected trigger kind only (cron: expression and
// time zone; interval: every and anchor; one-off: the instant; solar: event, latitude and
// longitude). Without JavaScript every field shows, each with its help text.
"use strict";
(function () {
  function row(name) {
    var input = document.getElementById("id_" + name);
    return input ? input.closest(".form-row, .fieldBox") : null;
  }

  function show(select) {
    var kinds = JSON.parse(select.dataset.kindFields);
    var wanted = kinds[select.value] || [];
    Object.keys(kinds).forEach(function (kind) {
      kinds[kind].forEach(function (name) {
        var r = row(name);
        if (r) {
          r.hidden = wanted.indexOf(name) === -1;
        }
      });
    });
  }

  function init() {
    var select = document.getElementById("id_trigger_kind");
    if (!select || !select.dataset.kindFields) {
      return;
    }
    select.addEventListener("change", function () { show(select); });
    show(select);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
})();
