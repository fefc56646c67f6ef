// The dashboard's only script (served by the app itself; nothing is loaded from elsewhere).
// Hovering a heatmap cell, a chart point or an event shows its values in a tooltip.
(function () {
  "use strict";
  function init() {
    var tip = document.getElementById("tooltip");
    if (!tip) { return; }
    document.querySelectorAll("[data-tip]").forEach(function (el) {
      var title = el.querySelector("title");
      if (title) { el.removeChild(title); }  // the script's tooltip replaces the browser's
      el.addEventListener("mouseenter", function () {
        tip.textContent = el.getAttribute("data-tip");
        tip.hidden = false;
      });
      el.addEventListener("mousemove", function (ev) {
        tip.style.left = (ev.clientX + 14) + "px";
        tip.style.top = (ev.clientY + 14) + "px";
      });
      el.addEventListener("mouseleave", function () { tip.hidden = true; });
    });
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
})();
