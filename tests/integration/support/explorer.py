"""What the run explorer's tests share: an embedded installation's settings, `fluksio ui` as a user starts it,
plain HTTP against it, and a real headless Chromium driven through Selenium and Debian's chromedriver."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any

import pytest

from tests.integration.support.servers import free_port, in_ci, need

REPO = Path(__file__).resolve().parents[3]
#: Screenshots of each page, kept for people to look at (ignored by git).
ARTIFACTS = REPO / "test-artifacts"
UI_FLOWS = Path(__file__).with_name("ui_flows.py")
#: Chromium's flags on a root, headless, bus-less machine (as `tests/integration/test_flower.py` runs it).
CHROMIUM_FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--window-size=1400,1000"]


def wait_until(check: Callable[[], Any], timeout: float, what: str) -> Any:
    """``check()``'s first truthy answer, asked every 50 ms, or an AssertionError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        answer = check()
        if answer:
            return answer
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout:g} s"
        time.sleep(0.05)


@dataclass
class Answer:
    status: int
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def http(method: str, url: str, headers: Mapping[str, str] | None = None, auth: tuple[str, str] | None = None,
         timeout: float = 30) -> Answer:
    request = urllib.request.Request(url, method=method, headers=dict(headers or {}),
                                     data=b"" if method == "POST" else None)
    if auth is not None:
        request.add_header("Authorization", "Basic " + base64.b64encode(":".join(auth).encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return Answer(response.status, response.headers, response.read())
    except urllib.error.HTTPError as exc:
        return Answer(exc.code, exc.headers, exc.read())


class UiProcess:
    """`fluksio ui` started as a user starts it, on a free 127.0.0.1 port, with ``env`` as its settings."""

    def __init__(self, workdir: Path, env: Mapping[str, str], *args: str, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = workdir / f"ui-{self.port}.log"
        self.auth: tuple[str, str] | None = None
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "fluksio.cli.main", "ui", "--port", str(self.port), *args],
                cwd=workdir, env=dict(env), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self, timeout: float = 60) -> UiProcess:
        def answers() -> bool:
            if self.process.poll() is not None:
                raise RuntimeError(f"fluksio ui exited {self.process.returncode}: {self.log_text()}")
            try:
                return http("GET", self.url + "/api/machines", auth=self.auth, timeout=2).status in (200, 401)
            except OSError:
                return False

        wait_until(answers, timeout, f"fluksio ui answering on {self.url}")
        return self

    def get(self, path: str, **kwargs: Any) -> Answer:
        return http("GET", self.url + path, auth=self.auth, **kwargs)

    def api(self, path: str) -> Any:
        answer = self.get(path)
        assert answer.status == 200, (answer.status, answer.body[:300])
        return answer.json()

    def xsrf(self) -> str:
        """The ``_xsrf`` cookie a GET sets: what a POST must echo back in ``X-XSRFToken`` (and as the cookie)."""
        answer = self.get("/api/machines")
        cookie = SimpleCookie(answer.headers.get("Set-Cookie", ""))
        return cookie["_xsrf"].value

    def post(self, path: str, token: str | None = None, cookie: str | None = None, **headers: str) -> Answer:
        """A POST as a script makes it: ``token`` in ``X-XSRFToken``, ``cookie`` (default: the token) as ``_xsrf``."""
        sent = dict(headers)
        if token is not None:
            sent["X-XSRFToken"] = token
        if cookie or token:
            sent["Cookie"] = f"_xsrf={cookie or token}"
        return http("POST", self.url + path, headers=sent, auth=self.auth)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else "(no log)"

    def stop(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(20)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(5)


def settings_env(workdir: Path) -> dict[str, str]:
    """An embedded installation in ``workdir`` as FLUKSIO_* settings: its store, artifacts, the explorer's flows,
    and a folder for the flows' marks."""
    return {"FLUKSIO_DATABASE_URL": f"sqlite:///{workdir / 'fluksio.db'}",
            "FLUKSIO_ARTIFACTS_DIR": str(workdir / "artifacts"), "FLUKSIO_FLOWS": str(UI_FLOWS),
            "FLUKSIO_CPUS": "2", "FLUKSIO_LEASE_INTERVAL_S": "0.5", "FLUKSIO_CONFIG": str(workdir / "none.toml"),
            "TEST_FLUKSIO_MARKS": str(workdir / "marks")}


def ui_env(settings_env: Mapping[str, str]) -> dict[str, str]:
    """This environment without the developer's FLUKSIO_* settings, with ``settings_env`` instead."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLUKSIO_")}
    env.update(settings_env)
    return env


@contextmanager
def chromium() -> Iterator[Any]:
    """A real headless Chromium under Selenium, through Debian's chromedriver (skipped outside CI without it)."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        message = "selenium is not installed (pip install -e '.[dev]')"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    driver_binary = need("chromedriver")
    browser_binary = need("chromium")
    options = webdriver.ChromeOptions()
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.binary_location = _real_chromium(browser_binary)
    driver = webdriver.Chrome(service=Service(executable_path=driver_binary), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def _real_chromium(wrapper: str) -> str:
    """Debian's ``/usr/bin/chromium`` is a shell script; chromedriver wants the browser binary itself."""
    real = Path("/usr/lib/chromium/chromium")
    return str(real) if real.exists() else wrapper


def wait_in(driver: Any, condition: Callable[[Any], Any], timeout: float = 30, what: str = "") -> Any:
    """Selenium's wait for ``condition(driver)`` to be truthy, with a message that says what did not happen.

    An element the page's live refresh replaced while the condition read it is asked for again.
    """
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.1,
                         ignored_exceptions=(NoSuchElementException, StaleElementReferenceException)
                         ).until(condition, message=what)


def screenshot(driver: Any, name: str) -> Path:
    """A picture of the page as it is, under test-artifacts/ (it must not be blank)."""
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    path.unlink(missing_ok=True)
    height = driver.execute_script("return Math.min(document.documentElement.scrollHeight, 4000)")
    driver.set_window_size(1400, max(1000, int(height)))
    assert driver.save_screenshot(str(path)), f"no screenshot of {driver.current_url}"
    driver.set_window_size(1400, 1000)
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG") and len(data) > 10_000, f"{path} is {len(data)} bytes: a blank page?"
    return path


def freeze(driver: Any) -> None:
    """Stop the page's live refresh and wait out one in flight, so that elements read next stay put."""
    driver.execute_script("const box = document.getElementById('live'); if (box) box.removeAttribute('data-live');")
    wait_in(driver, lambda d: d.execute_script(
        "const box = document.getElementById('live'); return !box || !box.dataset.busy;"), what="a quiet page")


def click(driver: Any, selector: str, timeout: float = 30) -> None:
    """Click the element, found again if the live refresh replaced it meanwhile."""
    from selenium.webdriver.common.by import By

    wait_in(driver, lambda d: d.find_element(By.CSS_SELECTOR, selector).click() or True, timeout,
            what=f"a click on {selector}")


def by_css(browser: Any, selector: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    return browser.find_elements(By.CSS_SELECTOR, selector)


def row_status(browser: Any, run_id: str) -> str | None:
    """The status a runs table's row of ``run_id`` shows; None while the run is not listed."""
    rows = by_css(browser, f'tr[data-run="{run_id}"]')
    return rows[0].get_attribute("data-status") if rows else None
