// Light or dark: the student's choice (the toggle, kept in localStorage) or else the system's
// (prefers-color-scheme, followed live). A classic script in <head>, so the theme is set before
// the first paint; the chat page's toggle calls window.themeChoose.
(function () {
  const KEY = "theme";
  const root = document.documentElement;
  const system = window.matchMedia("(prefers-color-scheme: dark)");

  function stored() {
    try {
      const value = window.localStorage.getItem(KEY);
      return value === "dark" || value === "light" ? value : null;
    } catch {
      return null; // storage refused (private mode): follow the system
    }
  }

  function apply() {
    root.dataset.theme = stored() || (system.matches ? "dark" : "light");
  }

  window.themeChoose = function (theme) {
    try {
      window.localStorage.setItem(KEY, theme);
    } catch {
      // not kept across reloads, still applied now
    }
    root.dataset.theme = theme;
  };

  system.addEventListener("change", apply);
  apply();
})();
