"""Open an HTML file in headless Chromium with the network unreachable, and say what rendered.

Through selenium and Debian's ``chromium-driver`` (``make chromium`` installs both): the page is
loaded from ``file://`` with the host resolver mapping every name to nothing, a proxy at a closed
local port and DevTools' offline mode, so a page that needed the network would show it as console
errors, failed requests or blank figures. :func:`open_page` returns the console messages, every
non-``file``/``data`` request, the element ids present, the verdicts, and per plotly figure whether
its screenshot region holds a drawing (:func:`drawn`, decoded by the browser). Screenshots are written to ``shots`` when
given. :func:`skip_reason` says why no browser test can run here (None: it can).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHROMIUM = ("chromium", "chromium-browser", "google-chrome")
DRIVER = ("chromedriver",)
OFFLINE_FLAGS = (
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--proxy-server=127.0.0.1:9",
    "--proxy-bypass-list=<-loopback>",
)


def _which(names: tuple[str, ...]) -> str | None:
    return next((p for p in (shutil.which(n) for n in names) if p), None)


def skip_reason() -> str | None:
    """Why the browser test cannot run (no Chromium, no chromedriver, no selenium); None when it can."""
    if _which(CHROMIUM) is None:
        return "no Chromium (make chromium installs it)"
    if _which(DRIVER) is None:
        return "no chromedriver (make chromium installs Debian's chromium-driver)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[test]')"
    return None


@dataclass
class Rendered:
    console: list[dict[str, Any]]
    requests: list[str]  # URLs other than file: and data:
    ids: set[str]
    verdicts: dict[str, str]  # claim -> status
    figures: dict[str, bool]  # data-figure name -> drawn
    shots: list[Path] = field(default_factory=list)

    def errors(self) -> list[dict[str, Any]]:
        return [m for m in self.console if m.get("level") == "SEVERE"]


_INK = """
const [data, done] = [arguments[0], arguments[arguments.length - 1]];
const image = new Image();
image.onload = () => {
  const canvas = document.createElement('canvas');
  [canvas.width, canvas.height] = [image.width, image.height];
  const context = canvas.getContext('2d');
  context.drawImage(image, 0, 0);
  const pixels = context.getImageData(0, 0, image.width, image.height).data;
  let ink = 0; const colours = new Set();
  for (let i = 0; i < pixels.length; i += 4) {
    if (pixels[i] < 235 || pixels[i + 1] < 235 || pixels[i + 2] < 235) {
      ink++;
      if (colours.size < 50) colours.add(pixels[i] << 16 | pixels[i + 1] << 8 | pixels[i + 2]);
    }
  }
  done([ink / (pixels.length / 4), colours.size]);
};
image.onerror = () => done([0, 0]);
image.src = 'data:image/png;base64,' + data;
"""


def drawn(driver: Any, png_base64: str, min_share: float = 0.01) -> bool:
    """Whether a screenshot shows a drawing: at least ``min_share`` of its pixels not near-white, in 3+ colours (decoded
    by the browser itself, from a ``data:`` URL)."""
    share, colours = driver.execute_async_script(_INK, png_base64)
    return share >= min_share and colours >= 3


def _driver(width: int, height: int) -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ.setdefault("SE_OFFLINE", "true")  # selenium must not fetch a driver: it is given one
    options = webdriver.ChromeOptions()
    options.binary_location = _which(CHROMIUM) or ""
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--window-size={width},{height}",
        "--hide-scrollbars",
        *OFFLINE_FLAGS,
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(service=Service(_which(DRIVER)), options=options)
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd(
        "Network.emulateNetworkConditions",
        {"offline": True, "latency": 0, "downloadThroughput": 0, "uploadThroughput": 0},
    )
    return driver


_WAIT = """
const done = arguments[arguments.length - 1], t0 = Date.now();
const ready = () => [...document.querySelectorAll('.figure')].every(f => f.querySelector('.main-svg'));
const wait = () => (ready() || Date.now() - t0 > 30000) ? setTimeout(done, 300) : setTimeout(wait, 100);
wait();
"""


def open_page(
    path: Path, shots: Path | None = None, width: int = 1400, height: int = 1000, page_shots: int = 0
) -> Rendered:
    """Load ``path`` offline, wait for the figures, and report (module doc);
    ``page_shots`` viewport screenshots from the top."""
    from selenium.webdriver.common.by import By

    driver = _driver(width, height)
    try:
        driver.get(Path(path).resolve().as_uri())
        driver.set_script_timeout(60)
        driver.execute_async_script(_WAIT)
        ids = {e.get_attribute("id") for e in driver.find_elements(By.CSS_SELECTOR, "[id]")}
        verdicts = {
            e.get_attribute("data-claim"): e.get_attribute("data-status")
            for e in driver.find_elements(By.CSS_SELECTOR, "#verdicts .verdict")
        }
        figures, taken = {}, []
        for element in driver.find_elements(By.CSS_SELECTOR, ".figure"):
            name = element.get_attribute("data-figure")
            driver.execute_script("arguments[0].scrollIntoView({block: 'start'});", element)
            png = element.screenshot_as_base64
            figures[name] = drawn(driver, png)
            if shots is not None:
                shots.mkdir(parents=True, exist_ok=True)
                (shots / f"figure-{name}.png").write_bytes(base64.b64decode(png))
                taken.append(shots / f"figure-{name}.png")
        if shots is not None:
            for k in range(page_shots):
                driver.execute_script(f"window.scrollTo(0, {k * (height - 80)});")
                target = shots / f"page-{k:02d}.png"
                target.write_bytes(driver.get_screenshot_as_png())
                taken.append(target)
        console = driver.get_log("browser")
        requests = [json.loads(m["message"])["message"] for m in driver.get_log("performance")]
        urls = [r["params"]["request"]["url"] for r in requests if r.get("method") == "Network.requestWillBeSent"]
        return Rendered(
            console, [u for u in urls if not u.startswith(("file:", "data:"))], ids, verdicts, figures, taken
        )
    finally:
        driver.quit()
