"""Suite-wide settings: one torch thread per xdist worker (two workers share two cores), a
fresh quantised-graph cache folder per test process, numba's kernel cache out of the source
tree, files with slow tests collected first."""

from __future__ import annotations

import os

import pytest
import torch

if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)


# The quantised-graph cache (tessel.quant.cache) of a test run lives in a fresh folder of its
# own, never in the user's ~/.cache: no test reuses a graph from an earlier run.
if "TESSEL_CACHE_DIR" not in os.environ:
    import tempfile

    os.environ["TESSEL_CACHE_DIR"] = tempfile.mkdtemp(prefix="tessel-test-cache-")

# numba keeps the machine code of the just-in-time kernels (tessel.sim.jit, cache=True) in a
# __pycache__ folder beside their module, in the source tree; the tests keep it in the user's
# cache instead, beside the ahead-of-time kernels (~/.cache/tessel), so no test writes into src/
os.environ.setdefault("NUMBA_CACHE_DIR", os.path.expanduser("~/.cache/tessel/numba"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Test files with a `slow` test run first, each file's tests still together and in order:
    xdist hands tests out in collection order, so a long test collected last would run alone
    on one core while the other idles; run early, the short tests even out the two cores."""
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)


@pytest.fixture(autouse=True)
def _no_columns(monkeypatch):
    """Tables fit $COLUMNS when it is set (tessel.display.output_width): no test inherits one
    (from the shell or a library); the tests of fitted output set it themselves."""
    monkeypatch.delenv("COLUMNS", raising=False)



@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """Headless Chromium through WebDriver (Debian's chromium and chromium-driver, installed by
    `make browser`), one per test module, for the tests that open the HTML pages; the test is
    skipped, saying how to install it, when there is none."""
    import shutil

    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver_path is None:
        pytest.skip("no headless Chromium: `make browser` (as root) installs Debian's chromium "
                    "and chromium-driver")
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--window-size=1300,1800",
                 f"--user-data-dir={tmp_path_factory.mktemp('chromium')}"):
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=opts)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()
