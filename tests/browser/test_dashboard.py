"""The dashboard in a real headless Chromium: `mpdp federation up`, one `mpdp train`, a DCA job, then a browser.

The federation is the real launcher (``mpdp federation up`` as a subprocess: curator, 3 parties, 2 compute nodes,
test mode); the Pathak job is the real CLI (``mpdp train``); a DCA job with one of five clients missing shows a
dropout. The browser is Debian's ``chromium`` driven through its ``chromedriver`` by Selenium, installed by
``deploy/browser-setup.sh`` when missing; Selenium never downloads a driver (explicit paths, ``SE_OFFLINE``).
If the browser cannot be installed, these tests fail with the reason: they are never skipped.

What a user sees: the job list names the job; following its link opens its page with the state timeline and
per-stage times; the DCA job's page shows the node agreement and the dropout; a party's page shows its ledger
with the ε it spent and the chart of budget spent over time (inline SVG). No page loads anything from another host. Screenshots go to ``MPDP_SCREENSHOTS`` (a folder;
default: the test's tmp folder); ``tools/dashboard_screenshots.py`` refreshes docs/images/ with them.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from mpdp.messages import common_pb2, dca_pb2
from mpdp_services.common.endpoints import Endpoints
from mpdp_services.common.processes import spawn
from tests.integration.conftest import synthetic_parts, write_parts

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
PARTIES = ["party-1", "party-2", "party-3"]
NODES = ["node-1", "node-2"]
WINDOW = (1280, 860)


# -- the browser ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def browser():
    """Chromium through chromedriver, both from the system (deploy/browser-setup.sh installs them if missing)."""
    setup = subprocess.run(["bash", str(REPO / "deploy" / "browser-setup.sh")], capture_output=True, text=True, timeout=900)
    if setup.returncode != 0:
        pytest.fail(f"deploy/browser-setup.sh could not provide chromium and chromedriver (exit {setup.returncode}): {setup.stderr.strip()[-2000:]}")
    chromium, driver = shutil.which("chromium") or shutil.which("chromium-browser"), shutil.which("chromedriver")
    if not (chromium and driver):
        pytest.fail(f"chromium ({chromium}) or chromedriver ({driver}) is not on PATH after deploy/browser-setup.sh")
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must never fetch a browser or a driver
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--no-first-run", "--disable-extensions",
                "--disable-background-networking", "--disable-component-update", "--disable-sync", f"--window-size={WINDOW[0]},{WINDOW[1]}"):
        options.add_argument(arg)
    d = webdriver.Chrome(service=Service(executable_path=driver), options=options)
    d.set_page_load_timeout(60)
    d.versions = (d.capabilities.get("browserVersion"), d.capabilities.get("chrome", {}).get("chromedriverVersion", "").split(" ")[0])  # type: ignore[attr-defined]
    yield d
    d.quit()


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    folder = Path(os.environ.get("MPDP_SCREENSHOTS") or tmp_path_factory.mktemp("screenshots"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


# -- the federation: `mpdp federation up` and `mpdp train` ---------------------------------------------------------
def _mpdp(*args: str) -> list[str]:
    return [sys.executable, "-m", "mpdp_services.cli.main", *args]


@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    root = tmp_path_factory.mktemp("dash")
    workdir = root / "fed"
    data = write_parts(root, PARTIES, synthetic_parts([60, 45, 52]))
    datasets = [f"--dataset=synthetic={p}:{d['synthetic']['path']}" for p, d in data.items()]
    launcher = spawn(_mpdp("federation", "up", "--workdir", str(workdir), "--parties", "3", "--compute-nodes", "2", "--test-mode", "--key-bits", "1024",
                           "--budget-epsilon", "6", *datasets),
                     cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=dict(os.environ))
    lines: list[str] = []
    url_found = threading.Event()

    def read() -> None:
        for raw in launcher.stderr:  # type: ignore[union-attr]
            lines.append(raw.decode(errors="replace"))
            if "dashboard: http" in lines[-1]:
                url_found.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        deadline = time.monotonic() + 300
        while not url_found.wait(0.5):
            assert launcher.poll() is None, f"mpdp federation up exited {launcher.returncode}: {''.join(lines)[-3000:]}"
            assert time.monotonic() < deadline, f"mpdp federation up printed no dashboard URL within 300 s: {''.join(lines)[-3000:]}"
        url = re.search(r"dashboard: (http://\S+)", "".join(lines)).group(1)  # type: ignore[union-attr]
        http = json.loads((workdir / "endpoints.json").read_text())["http"]
        assert url == http["curator"] + "/" and set(http) == {"curator", *PARTIES, *NODES}
        yield {"workdir": workdir, "dashboard": url, "http": http}
    finally:
        launcher.terminate()
        try:
            launcher.wait(60)
        except subprocess.TimeoutExpired:
            launcher.kill()
            launcher.wait()


@pytest.fixture(scope="module")
def jobs(fed) -> dict[str, str]:
    """One `mpdp train` (Pathak 2010) and one DCA sum with one of its five clients missing."""
    train = subprocess.run(_mpdp("train", "logreg", "--endpoints", str(fed["workdir"]), "--dataset", "synthetic", "--parties", ",".join(PARTIES),
                                 "--epsilon", "1", "--lam", "0.05", "--json"), cwd=REPO, capture_output=True, text=True, timeout=600)
    assert train.returncode == 0, train.stderr[-3000:]
    pathak = json.loads(train.stdout.strip().splitlines()[-1])["job_id"]

    from mpdp_services.dca_client.client import DcaOperator, submit_cohort

    ep = Endpoints.load(fed["workdir"])
    spec = dca_pb2.DcaJobSpec(dimension=3, clients=5, max_missing=1, epsilon=1.0, delta=1e-5, sensitivity=2 * np.sqrt(3), mode=common_pb2.CORRECTED,
                              clip_bounds=[1.0], compute_nodes=NODES, deadline_seconds=8, purpose="dashboard demo", validate=dca_pb2.VALIDATE_NONE)
    with DcaOperator(ep) as op:
        dca = op.create(spec)
        asyncio.run(submit_cohort(ep, ep.tls, dca, [f"c{i}" for i in range(4)], np.random.default_rng(1).uniform(-0.5, 0.5, size=(4, 3)), batched=False))
        status = op.wait(dca, timeout=120)
        assert status.state == "RELEASED", status
    return {"pathak": pathak, "dca": dca}


# -- what a user sees ----------------------------------------------------------------------------------------
def _shot(driver, path: Path) -> None:
    """A screenshot of the whole page (the window grows to the page's height for it)."""
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(WINDOW[0], max(WINDOW[1], min(int(height) + 140, 4000)))
    driver.save_screenshot(str(path))
    driver.set_window_size(*WINDOW)


def _same_origin_only(driver, origin: str) -> None:
    """Every link and resource on the page is this server's (relative URLs resolve to ``origin``)."""
    urls = driver.execute_script(
        "return Array.from(document.querySelectorAll('[href],[src],[action]')).map(e => e.href || e.src || e.action)")
    assert urls and all(u.startswith(origin + "/") for u in urls), urls
    assert not driver.find_elements("css selector", "script,img,iframe,link,form")


def test_job_list_links_to_the_job_timeline(browser, fed, jobs, shots):
    from selenium.webdriver.common.by import By

    print(f"chromium {browser.versions[0]}, chromedriver {browser.versions[1]}")
    origin = fed["http"]["curator"]
    browser.get(fed["dashboard"])
    assert browser.title.startswith("Jobs")
    table = browser.find_element(By.ID, "jobs")
    row = table.find_element(By.XPATH, f".//tr[td/a[text()='{jobs['pathak']}']]")
    assert "pathak2010" in row.text and "PUBLISHED" in row.text
    assert jobs["dca"] in table.text
    _same_origin_only(browser, origin)
    _shot(browser, shots / "dashboard-jobs.png")

    row.find_element(By.LINK_TEXT, jobs["pathak"]).click()
    assert browser.current_url == f"{origin}/jobs/{jobs['pathak']}"
    assert browser.find_element(By.TAG_NAME, "h1").text == f"Job {jobs['pathak']}"
    segments = browser.find_elements(By.CSS_SELECTOR, "#timeline > div")
    assert len(segments) >= 2 and all(s.size["width"] > 0 for s in segments)  # the state timeline is drawn
    events = browser.find_element(By.ID, "events").text
    assert "PUBLISHED" in events
    stages = browser.find_elements(By.CSS_SELECTOR, "#stages tr")[1:]
    assert len(stages) >= 2, browser.find_element(By.ID, "stages").text
    for tr in stages:
        name, secs = (td.text for td in tr.find_elements(By.TAG_NAME, "td")[:2])
        assert name and re.fullmatch(r"\d+\.\d{3} s", secs), (name, secs)
    guarantee = browser.find_element(By.ID, "guarantee").text
    assert "trust model" in guarantee and "mechanism" in guarantee
    _same_origin_only(browser, origin)
    _shot(browser, shots / "dashboard-job.png")


def test_dca_job_shows_node_agreement_and_the_dropout(browser, fed, jobs, shots):
    from selenium.webdriver.common.by import By

    origin = fed["http"]["curator"]
    browser.get(origin + "/dca")
    row = browser.find_element(By.XPATH, f"//table[@id='dca']//tr[td/a[text()='{jobs['dca']}']]")
    cells = [td.text for td in row.find_elements(By.TAG_NAME, "td")]
    assert cells[1] == "RELEASED" and cells[5:9] == ["5", "1", "4", "1"] and cells[9] == ", ".join(NODES), cells  # N, T, |A|, dropouts
    row.find_element(By.LINK_TEXT, jobs["dca"]).click()
    page = browser.find_element(By.TAG_NAME, "main").text
    assert "compute nodes agreeing\n2" in page and "clients included |A|\n4" in page and "dropouts N − |A|\n1" in page
    _shot(browser, shots / "dashboard-dca.png")


def test_a_party_page_shows_its_ledger(browser, fed, jobs, shots):
    """The ledger's entries, the ε spent, and the chart of budget spent over time: two more jobs make three steps."""
    from selenium.webdriver.common.by import By

    for eps in ("2", "0.5"):
        more = subprocess.run(_mpdp("train", "logreg", "--endpoints", str(fed["workdir"]), "--dataset", "synthetic", "--parties", ",".join(PARTIES),
                                    "--epsilon", eps, "--lam", "0.05", "--json"), cwd=REPO, capture_output=True, text=True, timeout=600)
        assert more.returncode == 0, more.stderr[-3000:]
    origin = fed["http"]["party-1"]
    browser.get(origin + "/")
    assert browser.find_element(By.TAG_NAME, "h1").text == "Privacy ledger of party-1"
    spent = float(browser.find_element(By.ID, "spent-epsilon").text)
    assert 0 < spent < 6  # the budget this federation was started with
    assert jobs["pathak"] in browser.find_element(By.ID, "entries").text
    chart = browser.find_element(By.ID, "budget-chart")
    assert chart.tag_name == "svg" and chart.is_displayed() and chart.size["width"] > 600 and chart.size["height"] > 200
    basic, acc, budget = (browser.find_element(By.ID, i) for i in ("basic-line", "accountant-line", "budget-line"))
    assert float(basic.get_attribute("data-last")) == 3.5 and float(budget.get_attribute("data-value")) == 6.0
    assert 0 < float(acc.get_attribute("data-last")) <= 3.5 and abs(float(acc.get_attribute("data-last")) - spent) < 1e-3 * max(1.0, spent)
    # drawn, not just present: the lines have length on screen and three rises (one per job)
    assert browser.execute_script("return arguments[0].getTotalLength()", basic) > 300
    assert len(basic.get_attribute("points").split()) == 2 + 2 * 3
    _same_origin_only(browser, origin)
    _shot(browser, shots / "party-ledger.png")
