// Airflow's look for the DLQ view's pages. Airflow shows them in an iframe of its own origin (sandbox
// "allow-scripts allow-same-origin"), so this script reads the UI around it: the colour mode next-themes keeps
// as a class ("light"/"dark") on Airflow's <html>, and the Chakra UI tokens Airflow's theme defines (colours,
// fonts, radii), which a deployment's custom theme ([api] theme) changes too. It copies them into the page's own
// CSS variables (dead_letters.css), and follows the user's Appearance switch while the page is open.
// Opened on its own (no Airflow around it), the page takes the mode Airflow stored (localStorage "theme", the
// same origin) or the system's, with Airflow's default colours from the stylesheet.
// It runs in <head>, before the page is painted, so a dark UI never flashes a white page.
(function followAirflowsTheme() {
  "use strict";

  const root = document.documentElement;
  // next-themes' storage key and values in Airflow 3's UI ("system" follows the operating system).
  const STORAGE_KEY = "theme";
  const SYSTEM_DARK = window.matchMedia("(prefers-color-scheme: dark)");
  // Our variable ← Airflow's Chakra token (semantic tokens resolve per mode on Airflow's <html>).
  const TOKENS = {
    "--fg": "--chakra-colors-fg",
    "--muted": "--chakra-colors-fg-muted",
    "--line": "--chakra-colors-border",
    "--subtle": "--chakra-colors-bg-subtle",
    "--hover": "--chakra-colors-bg-muted",
    "--accent": "--chakra-colors-brand-solid",
    "--on-accent": "--chakra-colors-brand-contrast",
    "--link": "--chakra-colors-fg-info",
    "--bar": "--chakra-colors-failed-solid",
    "--error": "--chakra-colors-fg-error",
    "--font": "--chakra-fonts-body",
    "--mono": "--chakra-fonts-mono",
    "--radius": "--chakra-radii-l2",
  };

  // Airflow's document, when this page is its iframe; null when opened on its own or framed elsewhere.
  function airflowDocument() {
    try {
      if (window.parent === window) return null;
      const doc = window.parent.document;
      return doc && doc.documentElement ? doc : null;
    } catch (crossOrigin) {
      return null;
    }
  }

  function storedMode() {
    let stored = null;
    try {
      stored = window.localStorage.getItem(STORAGE_KEY);
    } catch (unavailable) {
      stored = null;
    }
    if (stored === "dark" || stored === "light") return stored;
    return SYSTEM_DARK.matches ? "dark" : "light";
  }

  function modeOf(doc) {
    const classes = doc ? doc.documentElement.classList : null;
    if (classes && classes.contains("dark")) return "dark";
    if (classes && classes.contains("light")) return "light";
    return storedMode();
  }

  // The colour the iframe sits on: the nearest of its ancestors in Airflow's page that paints a background.
  function surroundingBackground(doc) {
    let node = window.frameElement ? window.frameElement.parentElement : null;
    while (node) {
      const colour = doc.defaultView.getComputedStyle(node).backgroundColor;
      if (colour && colour !== "transparent" && !/^rgba\(.*,\s*0\)$/.test(colour)) return colour;
      node = node.parentElement;
    }
    return doc.defaultView.getComputedStyle(doc.body || doc.documentElement).getPropertyValue("--chakra-colors-bg").trim();
  }

  function apply() {
    const doc = airflowDocument();
    const mode = modeOf(doc);
    root.classList.toggle("dark", mode === "dark");
    root.classList.toggle("light", mode !== "dark");
    root.style.colorScheme = mode;
    const tokens = doc ? doc.defaultView.getComputedStyle(doc.body || doc.documentElement) : null;
    for (const [ours, airflows] of Object.entries(TOKENS)) {
      const value = tokens ? tokens.getPropertyValue(airflows).trim() : "";
      if (value) root.style.setProperty(ours, value);
      else root.style.removeProperty(ours); // the stylesheet's Airflow defaults for this mode
    }
    const background = doc ? surroundingBackground(doc) : "";
    if (background) root.style.setProperty("--bg", background);
    else root.style.removeProperty("--bg");
  }

  apply();
  const doc = airflowDocument();
  if (doc) {
    // The Appearance menu flips the class on Airflow's <html>; a custom theme may restyle it too.
    new MutationObserver(apply).observe(doc.documentElement, { attributes: true, attributeFilter: ["class", "style"] });
  }
  window.addEventListener("storage", (event) => {
    if (event.key === STORAGE_KEY || event.key === null) apply();
  });
  SYSTEM_DARK.addEventListener("change", apply);
})();
