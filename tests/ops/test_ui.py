"""The management UI in a real headless browser (Debian's chromium + chromedriver through
selenium): log in, open every page, create a queue through the UI, publish to it, get the
message back, and check a screenshot of the overview is a real picture (not blank).

`.ci/run` installs chromium and chromium-driver with apt-get when they are missing and sets
BROKER_UI_TEST_REQUIRED=1, so in CI a missing browser fails instead of skipping."""

from __future__ import annotations

import io
import os
import shutil
import time
import uuid

import pytest

pytestmark = pytest.mark.usefixtures("ours_only")

PAGES = {"overview": "totals", "connections": "connections-table",
         "stream-connections": "stream-connections-table",
         "channels": "channels-table", "exchanges": "exchanges-table",
         "queues": "queues-table", "users": "users-table", "vhosts": "vhosts-table",
         "permissions": "permissions-table", "policies": "policies-table",
         "federation": "federation-table", "shovels": "shovels-table"}


def _binaries() -> tuple[str | None, str | None]:
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which(
        "google-chrome")
    driver = shutil.which("chromedriver") or (
        "/usr/lib/chromium/chromedriver" if os.path.exists("/usr/lib/chromium/chromedriver")
        else None)
    return browser, driver


@pytest.fixture(scope="module")
def driver():
    browser, chromedriver = _binaries()
    if browser is None or chromedriver is None:
        if os.environ.get("BROKER_UI_TEST_REQUIRED"):
            pytest.fail("chromium / chromedriver not installed (apt-get install chromium "
                        "chromium-driver)")
        pytest.skip("chromium / chromedriver not installed")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = browser
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                "--disable-gpu", "--window-size=1280,1000"):
        opts.add_argument(arg)
    d = webdriver.Chrome(service=Service(chromedriver), options=opts)
    d.set_page_load_timeout(30)
    yield d
    d.quit()


def wait_id(driver, element_id: str, timeout: float = 15):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout).until(
        ec.visibility_of_element_located((By.ID, element_id)))


def wait_text(driver, element_id: str, text: str, timeout: float = 15) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, timeout).until(
        ec.text_to_be_present_in_element((By.ID, element_id), text))


def login(driver, base: str) -> None:
    driver.get(base + "/")
    driver.execute_script("sessionStorage.clear()")  # a fresh login each time
    driver.refresh()
    wait_id(driver, "username").send_keys("guest")
    driver.find_element("id", "password").send_keys("guest")
    driver.find_element("id", "login-button").click()
    wait_id(driver, "totals")


def test_every_page_opens(driver, api_base):
    login(driver, api_base)
    for page, element in PAGES.items():
        driver.get(f"{api_base}/#/{page}")
        wait_id(driver, element)
    assert driver.find_element("id", "whoami").text == "User guest"


def test_create_queue_publish_and_get_back_through_the_ui(driver, api_base, api):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    name = f"ui-{uuid.uuid4().hex[:8]}"
    login(driver, api_base)
    driver.get(f"{api_base}/#/queues")
    wait_id(driver, "add-queue-name").send_keys(name)
    driver.find_element("id", "add-queue-durable").click()  # a transient queue
    driver.find_element("id", "add-queue-button").click()
    wait_text(driver, "queues-table", name)
    assert api.get(f"/api/queues/%2F/{name}").json()["durable"] is False
    driver.find_element(By.LINK_TEXT, name).click()
    wait_text(driver, "queue-title", name)
    wait_id(driver, "publish-payload").send_keys("hello from the UI")
    driver.find_element("id", "publish-button").click()
    wait_text(driver, "publish-result", "Message published.")
    Select(driver.find_element("id", "get-ackmode")).select_by_visible_text(
        "ack_requeue_false")
    driver.find_element("id", "get-button").click()
    wait_text(driver, "get-results", "hello from the UI")
    assert api.get(f"/api/queues/%2F/{name}").json()["messages"] == 0
    driver.find_element("id", "delete-button").click()
    wait_id(driver, "queues-table")
    assert api.get(f"/api/queues/%2F/{name}").status_code == 404


def test_federation_page_shows_a_link_and_its_state(driver, api_base, api, broker):
    import socket

    import pika

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    x, up, pol = (f"{p}-{uuid.uuid4().hex[:8]}" for p in ("uix", "uiup", "uipol"))
    api.put(f"/api/parameters/federation-upstream/%2F/{up}",
            json={"value": {"uri": f"amqp://127.0.0.1:{port}", "reconnect-delay": 30}})
    api.put(f"/api/policies/%2F/{pol}", json={"pattern": f"^{x}$", "apply-to": "exchanges",
                                             "definition": {"federation-upstream": up}})
    try:
        with pika.BlockingConnection(pika.URLParameters(broker.url)) as conn:
            conn.channel().exchange_declare(x, "fanout")
        login(driver, api_base)
        driver.get(f"{api_base}/#/federation")
        for _ in range(30):  # the page shows what the API says when it loads
            wait_id(driver, "federation-table")
            text = driver.find_element("id", "federation-table").text
            if up in text and "econnrefused" in text:
                break
            driver.refresh()
        assert up in text and "error" in text and "econnrefused" in text
    finally:
        api.delete(f"/api/policies/%2F/{pol}")
        api.delete(f"/api/parameters/federation-upstream/%2F/{up}")
        with pika.BlockingConnection(pika.URLParameters(broker.url)) as conn:
            conn.channel().exchange_delete(x)


def test_exchanges_page_adds_a_delayed_exchange_and_shows_what_waits(driver, api_base,
                                                                      api, broker):
    """Issue 50: the add form declares an x-delayed-message exchange with its x-delayed-type,
    and the table shows how many messages wait and when the next is due."""
    import pika
    from selenium.webdriver.support.ui import Select

    x = f"uidx-{uuid.uuid4().hex[:8]}"
    login(driver, api_base)
    driver.get(f"{api_base}/#/exchanges")
    wait_id(driver, "add-exchange")
    driver.find_element("id", "add-exchange-name").send_keys(x)
    Select(driver.find_element("id", "add-exchange-type")).select_by_visible_text(
        "x-delayed-message")
    Select(driver.find_element("id", "add-exchange-delayed-type")).select_by_visible_text(
        "topic")
    driver.find_element("id", "add-exchange-button").click()
    try:
        for _ in range(50):
            if api.get(f"/api/exchanges/%2F/{x}").status_code == 200:
                break
            time.sleep(0.1)
        got = api.get(f"/api/exchanges/%2F/{x}").json()
        assert got["type"] == "x-delayed-message"
        assert got["arguments"] == {"x-delayed-type": "topic"}
        with pika.BlockingConnection(pika.URLParameters(broker.url)) as conn:
            conn.channel().basic_publish(x, "k", b"w", pika.BasicProperties(
                headers={"x-delay": 600_000}))
        for _ in range(30):
            driver.refresh()
            wait_id(driver, "exchanges-table")
            row = next((r.text for r in driver.find_elements(
                "css selector", "#exchanges-table tr") if x in r.text), "")
            if "1 (next" in row:
                break
            time.sleep(0.2)
        assert "x-delayed-message (topic)" in row and "1 (next 20" in row, row
    finally:
        api.delete(f"/api/exchanges/%2F/{x}")


def test_overview_screenshot_is_not_blank(driver, api_base):
    import matplotlib.image as mpimg

    login(driver, api_base)
    wait_id(driver, "chart-rates")
    png = driver.get_screenshot_as_png()
    assert len(png) > 10_000
    pixels = mpimg.imread(io.BytesIO(png), format="png")
    assert pixels.std() > 0.05  # text, charts and colours, not a blank page
    out = os.environ.get("BROKER_UI_SCREENSHOT")
    if out:  # refresh docs/ui-overview.png: BROKER_UI_SCREENSHOT=docs/ui-overview.png
        with open(out, "wb") as f:
            f.write(png)


def test_policy_form_offers_the_quorum_keys(driver, api_base, api):
    """The policy form lists the keys by queue type, as RabbitMQ's does; a click on
    delivery-limit adds it to the definition, and the policy is created with it."""
    from selenium.webdriver.common.by import By

    name = f"ui-pol-{uuid.uuid4().hex[:8]}"
    login(driver, api_base)
    driver.get(f"{api_base}/#/policies")
    wait_id(driver, "policies-table")
    keys = wait_id(driver, "policy-keys").text
    assert "Queues [Quorum]" in keys and "delivery-limit" in keys
    driver.find_element(By.CSS_SELECTOR, '.policy-key[data-key="delivery-limit"]').click()
    assert '"delivery-limit":20' in driver.find_element("id", "policy-definition").get_attribute(
        "value")
    driver.find_element("id", "policy-name").send_keys(name)
    driver.find_element("id", "policy-pattern").send_keys("^ui-quorum-")
    driver.find_element("id", "add-policy-button").click()
    wait_text(driver, "policies-table", name)
    try:
        assert api.get(f"/api/policies/%2F/{name}").json()["definition"] == {
            "max-length": 1000, "delivery-limit": 20}
    finally:
        api.delete(f"/api/policies/%2F/{name}")


def test_stream_connections_page_shows_publishers_and_consumers(driver):
    """The Stream connections page (RabbitMQ's rabbitmq_stream_management tab) lists a
    stream protocol connection; its page shows the publisher and consumer it has, the
    stream's queue page shows them too, and Close closes it."""
    from selenium.webdriver.common.by import By

    from broker.embedded import EmbeddedBroker
    from tests.stream import raw_client as rc

    b = EmbeddedBroker(stream_listeners_tcp_default="0", management_tcp_port=-1,
                       prometheus_tcp_port=-1).start()
    base = f"http://127.0.0.1:{b.management_port}"
    sock = rc.opened(b, {"connection_name": "ui-stream-client"})
    try:
        assert rc.create_stream(sock, "ui-stream") == 1
        assert rc.declare_publisher(sock, 7, "ui-producer", "ui-stream") == 1
        sock.sendall(rc.publish_frame(7, [(1, b"one"), (2, b"two")]))
        assert rc.subscribe_first(sock, 3, "ui-stream") == 1
        login(driver, base)
        driver.get(f"{base}/#/stream-connections")
        wait_text(driver, "stream-connections-table", "ui-stream-client")
        driver.find_element(By.CSS_SELECTOR, "a.stream-connection-link").click()
        wait_text(driver, "stream-publishers-table", "ui-producer")
        consumers = wait_id(driver, "stream-consumers-table").text
        assert "ui-stream" in consumers
        driver.get(f"{base}/#/queue/%2F/ui-stream")
        wait_text(driver, "stream-publishers-table", "ui-producer")
        driver.get(f"{base}/#/stream-connections")
        wait_text(driver, "stream-connections-table", "ui-stream-client")
        driver.find_element(By.CSS_SELECTOR, "button.close-stream-connection").click()
        assert rc.closed(sock)
    finally:
        sock.close()
        b.stop()


QUEUE_TYPES = ("classic", "quorum", "stream")


def _type_cells(driver) -> dict[str, str]:
    """Queue name -> the Type column's text, from the Queues page's table."""
    from selenium.webdriver.common.by import By

    table = wait_id(driver, "queues-table")
    heads = [th.text for th in table.find_elements(By.CSS_SELECTOR, "thead th")]
    assert "Type" in heads, heads
    name_at, type_at = heads.index("Name"), heads.index("Type")
    cells = {}
    for row in table.find_elements(By.CSS_SELECTOR, "tbody tr"):
        tds = [td.text for td in row.find_elements(By.TAG_NAME, "td")]
        cells[tds[name_at]] = tds[type_at]
    return cells


def test_queues_page_shows_each_queue_type(driver, api_base, api):
    """A Type column, as RabbitMQ's Queues page has, with each queue's type from the API."""
    tag = uuid.uuid4().hex[:8]
    names = {t: f"ui-{t}-{tag}" for t in QUEUE_TYPES}
    for t, name in names.items():
        assert api.put(f"/api/queues/%2F/{name}", json={
            "durable": True, "arguments": {"x-queue-type": t}}).status_code in (201, 204)
    try:
        listed = {q["name"]: q["type"] for q in api.get("/api/queues").json()}
        assert {listed[n] for n in names.values()} == set(QUEUE_TYPES)  # the API's type field
        login(driver, api_base)
        driver.get(f"{api_base}/#/queues")
        wait_text(driver, "queues-table", names["stream"])
        cells = _type_cells(driver)
        assert {t: cells[name] for t, name in names.items()} == {t: t for t in QUEUE_TYPES}
    finally:
        for name in names.values():
            api.delete(f"/api/queues/%2F/{name}")


@pytest.mark.parametrize("queue_type", QUEUE_TYPES)
def test_add_queue_form_creates_each_type(driver, api_base, api, queue_type):
    """The form's Type select sets x-queue-type; for quorum and stream it hides durability
    and auto-delete and declares durable, not auto-deleted (RabbitMQ's form does the same),
    for classic it keeps them (here: auto-delete ticked)."""
    from selenium.webdriver.support.ui import Select

    name = f"ui-form-{queue_type}-{uuid.uuid4().hex[:8]}"
    login(driver, api_base)
    driver.get(f"{api_base}/#/queues")
    Select(wait_id(driver, "add-queue-type")).select_by_visible_text(queue_type.capitalize())
    classic = queue_type == "classic"
    durable = driver.find_element("id", "add-queue-durable")
    auto_delete = driver.find_element("id", "add-queue-auto-delete")
    assert durable.is_displayed() is classic and auto_delete.is_displayed() is classic
    if classic:
        auto_delete.click()
    driver.find_element("id", "add-queue-name").send_keys(name)
    driver.find_element("id", "add-queue-button").click()
    wait_text(driver, "queues-table", name)
    try:
        q = api.get(f"/api/queues/%2F/{name}").json()
        assert (q["type"], q["durable"], q["auto_delete"]) == (queue_type, True, classic)
        assert q["arguments"]["x-queue-type"] == queue_type
        assert _type_cells(driver)[name] == queue_type
    finally:
        api.delete(f"/api/queues/%2F/{name}")


def test_overview_y_axis_labels_are_not_clipped(driver, api_base, api, broker):
    """With 12 000 messages queued the Queued messages chart's y labels read "12,000": the
    axis leaves them room, so nothing is drawn in the canvas's leftmost pixels (uPlot's
    fixed 50 px axis cut the first digit off at the edge)."""
    import pika

    name = f"ui-axis-{uuid.uuid4().hex[:8]}"
    with pika.BlockingConnection(pika.URLParameters(broker.url)) as conn:
        ch = conn.channel()
        ch.queue_declare(name)
        for _ in range(12_000):
            ch.basic_publish("", name, b"x")
    try:
        for _ in range(100):  # the publishes are asynchronous: wait until all are queued
            if api.get(f"/api/queues/%2F/{name}").json()["messages"] == 12_000:
                break
            time.sleep(0.1)
        login(driver, api_base)
        wait_id(driver, "chart-queued")
        edge, labels = driver.execute_async_script("""
            const done = arguments[arguments.length - 1];
            const find = () => {
              const c = document.querySelector("#chart-queued canvas");
              if (!c || !c.width) { setTimeout(find, 100); return; }
              requestAnimationFrame(() => {  // after uPlot's draw
                const ink = (x0, x1) => {  // pixels drawn on in columns x0..x1-1
                  const px = c.getContext("2d").getImageData(x0, 0, x1 - x0, c.height).data;
                  let n = 0;
                  for (let i = 3; i < px.length; i += 4) if (px[i] > 0) n += 1;
                  return n;
                };
                done([ink(0, 4), ink(4, 40)]);
              });
            };
            find();""")
        assert labels > 0  # the labels are drawn left of the plot...
        assert edge == 0  # ...and clear of the canvas's edge
    finally:
        api.delete(f"/api/queues/%2F/{name}")


def test_overview_totals_follow_the_api(driver, api_base, api):
    """The totals above the charts are read again with every chart sample (5 s), so they
    agree with the charts instead of keeping the figures the page was opened with."""
    login(driver, api_base)
    before = int(wait_id(driver, "total-queues").text)
    name = f"ui-totals-{uuid.uuid4().hex[:8]}"
    api.put(f"/api/queues/%2F/{name}", json={"durable": False})
    try:
        wait_text(driver, "total-queues", str(before + 1))
    finally:
        api.delete(f"/api/queues/%2F/{name}")


def test_scripted_login_from_the_url(driver, api_base):
    """RabbitMQ's #/login/<user>/<password>[/<page>] logs in without the form (so a headless
    browser can take a screenshot); the password leaves the address bar; a wrong one shows
    the form with "Login failed"."""
    from selenium.webdriver.common.by import By

    driver.get(api_base + "/")
    driver.execute_script("sessionStorage.clear()")
    driver.refresh()
    wait_id(driver, "username")
    driver.get(f"{api_base}/#/login/guest/guest")
    wait_id(driver, "totals")
    assert not driver.find_elements(By.ID, "login-form")
    assert driver.current_url.endswith("/#/") and "guest" not in driver.current_url
    wait_text(driver, "whoami", "User guest")

    driver.execute_script("sessionStorage.clear()")
    driver.get(f"{api_base}/#/login/guest/wrong")
    wait_text(driver, "login-error", "Login failed")
    assert "wrong" not in driver.current_url

    driver.execute_script("sessionStorage.clear()")
    driver.get("about:blank")  # a fresh page load straight onto a page of the UI
    driver.get(f"{api_base}/#/login/guest/guest/queues")
    wait_id(driver, "queues-table")
    assert driver.current_url.endswith("/#/queues")
