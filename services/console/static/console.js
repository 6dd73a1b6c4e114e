// cardflow console: refresh the page's content every 10 s (keeps focus and typed text: it pauses while
// a form field has focus or text), and a button to pause. Pages work without this script.
(() => {
  const REFRESH_MS = 10000;
  const toggle = document.getElementById("refresh-toggle");
  let paused = sessionStorage.getItem("cardflow-refresh") === "paused";
  const label = () => { toggle.textContent = paused ? toggle.dataset.resume : toggle.dataset.pause;
                        toggle.setAttribute("aria-pressed", String(paused)); };
  toggle.addEventListener("click", () => {
    paused = !paused; sessionStorage.setItem("cardflow-refresh", paused ? "paused" : "on"); label();
  });
  label();
  const busy = () => {
    const active = document.activeElement;
    if (active && active.closest("main") && active.matches("input, select, textarea, button, a")) return true;
    return [...document.querySelectorAll("main input")].some((field) => field.value && field.type !== "hidden");
  };
  setInterval(async () => {
    if (paused || document.hidden || busy()) return;
    try {
      const response = await fetch(location.href, { headers: { "x-cardflow-refresh": "1" } });
      if (!response.ok) return;
      const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
      const main = fresh.querySelector("main"), banner = fresh.querySelector(".banner");
      if (main) document.querySelector("main").replaceChildren(...main.childNodes);
      const current = document.querySelector(".banner");
      if (current && !banner) current.remove();
      else if (banner && current) current.replaceWith(banner);
      else if (banner) document.querySelector("header").after(banner);
    } catch (error) { /* the next tick tries again */ }
  }, REFRESH_MS);
})();
