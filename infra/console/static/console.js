// The console's one script, served from the package: light progressive enhancement only. Every
// page works without it (the filters are a plain GET form, the pages plain links).
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  const filters = document.getElementById("filters");
  if (filters) {
    // A choice applies at once; text fields apply on Enter, as a form does.
    for (const select of filters.querySelectorAll("select")) {
      select.addEventListener("change", () => filters.requestSubmit());
    }
    // Empty fields stay out of the URL, so a shared view's address holds only its filters.
    filters.addEventListener("submit", () => {
      for (const field of filters.querySelectorAll("input, select")) {
        if (field.value === "") field.disabled = true;
      }
    });
    // Coming back to the page from the browser's cache, the fields are usable again.
    window.addEventListener("pageshow", () => {
      for (const field of filters.querySelectorAll("input, select")) field.disabled = false;
    });
  }
  // "/" focuses the search box, as on the trace platforms.
  const search = document.querySelector('input[type="search"]');
  if (search) {
    document.addEventListener("keydown", (event) => {
      if (event.key === "/" && document.activeElement !== search && !(event.target instanceof HTMLInputElement)) {
        event.preventDefault();
        search.focus();
      }
    });
  }
});
