"""A headless Chromium driven by Selenium for the console's browser tests and screenshots.

Debian's ``chromium`` and ``chromium-driver`` (``.ci/run`` installs them); nothing is
downloaded (Selenium Manager is never asked: the driver path is given). Each browser gets a
fresh profile directory, removed when it quits.
"""

import base64
import os
import shutil
import tempfile
import time

CHROMIUM = os.environ.get("KAFKATW_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("KAFKATW_CHROMEDRIVER", "/usr/bin/chromedriver")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars", "--force-device-scale-factor=1")


def missing():
    """Why no browser can run here, or None."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.access(path, os.X_OK):
            return "%s is not installed (apt-get install chromium chromium-driver)" % path
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[test]')"
    return None


def require(testcase=None):
    """Skip the calling test where no browser can run, or fail it under CI
    (``KAFKATW_REQUIRE_BROWSER=1``, set by .ci/run, which installs Chromium)."""
    why = missing()
    if why is None:
        return
    if os.environ.get("KAFKATW_REQUIRE_BROWSER") == "1":
        raise AssertionError("the console's browser tests need Chromium: %s" % why)
    from twisted.trial.unittest import SkipTest

    raise SkipTest(why)


class Browser:
    """One Chromium at 1280x800. ``credentials`` (user, password) are sent as HTTP basic on
    every request (a DevTools header, as a browser that was logged in would)."""

    def __init__(self, width=1280, height=800, credentials=None):
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        self.profile = tempfile.mkdtemp(prefix="kafkatw-chromium-")
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for flag in FLAGS:
            options.add_argument(flag)
        options.add_argument("--user-data-dir=%s" % self.profile)
        options.add_argument("--window-size=%d,%d" % (width, height))
        self.driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
        # the page's viewport itself at width x height (the window's would include no chrome
        # in headless mode, but its size is not the viewport's on every version)
        self.driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        self.width, self.height = width, height
        if credentials is not None:
            self.login(*credentials)

    def login(self, user, password):
        token = base64.b64encode(("%s:%s" % (user, password)).encode("utf-8")).decode("ascii")
        self.driver.execute_cdp_cmd("Network.enable", {})
        self.driver.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": {"Authorization": "Basic " + token}})

    def open(self, url):
        self.driver.get(url)

    def rendered(self):
        """The console page's render count (``main[data-rendered]``), None before the first."""
        found = self.css("main")
        return found[0].get_attribute("data-rendered") if found else None

    def visit(self, url, timeout=20.0):
        """Open ``url`` and wait for the console's next render: a hash change keeps the
        document, so the count must move past the one before."""
        before = self.rendered()
        self.open(url)
        self.wait_for(lambda: self.rendered() not in (None, before), timeout, what="the render of " + url)

    def css(self, selector):
        from selenium.webdriver.common.by import By

        return self.driver.find_elements(By.CSS_SELECTOR, selector)

    def wait_for(self, predicate, timeout=20.0, what="the page"):
        """``predicate()``'s first true value, polled every 50 ms for at most ``timeout`` s."""
        from selenium.common.exceptions import StaleElementReferenceException, WebDriverException

        deadline = time.monotonic() + timeout
        last = None
        while True:
            try:
                value = predicate()
                if value:
                    return value
            except (StaleElementReferenceException, WebDriverException) as e:
                last = e  # re-rendered between the find and the read: ask again
            if time.monotonic() > deadline:
                raise AssertionError("timed out after %.0f s waiting for %s (%s); page text: %s"
                                     % (timeout, what, last, self.text()[:800]))
            time.sleep(0.05)

    def text(self, selector="body"):
        try:
            found = self.css(selector)
            return found[0].text if found else ""
        except Exception:
            return ""

    def screenshot(self, path):
        self.driver.save_screenshot(path)

    def quit(self):
        try:
            self.driver.quit()
        finally:
            shutil.rmtree(self.profile, ignore_errors=True)
