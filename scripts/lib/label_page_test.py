"""The label page in real browsers (scripts/checks.d/60-labels.sh).

A short run on the embedded simulator takes its anchor labels from people
(`labels.source = "human"`). Headless Chromium, driven through Selenium and
Debian's chromedriver, labels the first two steps' anchor rollouts on the
page with the keyboard and the mouse, reading the answer from the
simulator's hidden flag (labels/sim_flags.jsonl, which the page server never
reads); half-way the trainer and the page server are killed and restarted
while the page stays open. Headless Firefox, driven through its own
WebDriver BiDi endpoint (Debian packages no geckodriver), labels the last
step's. The run must end with the same metrics as the same run with the
simulator's labels (wall-clock fields aside), with every label recorded once.
Both browsers send everything but loopback to a proxy on 127.0.0.1:9 (refused),
so nothing leaves the machine.

    python3 scripts/lib/label_page_test.py BIN ROOT ARTIFACTS
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import base64
import shutil
import tempfile

import websocket
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.common.action_chains import ActionChains

BIN, ROOT, ART = sys.argv[1], sys.argv[2], sys.argv[3]
os.makedirs(ART, exist_ok=True)
STEPS = 3
RUN = [
    "train", "--quiet", "--config", "configs/grpo_sim.toml", "--arm", "wmrl",
    "--steps", str(STEPS),
    "--set", "rollout.n_groups=4", "--set", "rollout.group_size=4",
    "--set", "rollout.max_steps=120", "--set", "eval.every=0",
    "--set", "eval.at_start=false", "--set", "eval.tasks=[0]",
    "--set", "eval.init_states=[16,17]", "--set", "eval.in_domain=false",
    "--set", "wmrl.calibration.min_pairs=4", "--set", "wmrl.calibration.refit_every=4",
]
ENV = dict(os.environ, RAYON_NUM_THREADS="1")
DEADLINE = time.time() + 600


def log(*a):
    print("labels:", *a, flush=True)


def wait_for(what, cond, timeout=180, every=0.2):
    end = min(time.time() + timeout, DEADLINE)
    while time.time() < end:
        v = cond()
        if v:
            return v
        time.sleep(every)
    raise SystemExit(f"labels: timed out waiting for {what}")


def jsonl(path):
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(l) for l in f if l.strip()]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


sim_dir, human_dir = os.path.join(ROOT, "sim"), os.path.join(ROOT, "human")
labels_dir = os.path.join(human_dir, "labels")

# The reference: the same run with the simulator's labels.
t0 = time.time()
subprocess.run([BIN] + RUN + ["--out", sim_dir], env=ENV, check=True,
               stdout=subprocess.DEVNULL)
log(f"simulator-label run: {time.time() - t0:.0f} s")

procs = []


def start_trainer(resume):
    args = ["train", "--quiet", "--resume", human_dir] if resume else RUN + [
        "--set", 'labels.source="human"', "--set", "labels.poll_ms=100",
        "--out", human_dir]
    p = subprocess.Popen([BIN] + args, env=ENV, stdout=subprocess.DEVNULL,
                         stderr=open(os.path.join(ROOT, "trainer.log"), "a"))
    procs.append(p)
    return p


PORT = free_port()


def start_server():
    p = subprocess.Popen([BIN, "label", "serve", "--run", human_dir,
                          "--bind", f"127.0.0.1:{PORT}", "--lease-secs", "10"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    procs.append(p)
    line = p.stdout.readline()
    assert "label page for" in line, line
    return p, line.split(": ", 1)[1].strip()


def kill(p):
    p.send_signal(signal.SIGKILL)
    p.wait()


# The rollout on the page once the page takes presses: the id is set before
# the frames load, and until they have (and the last label's request is
# done) the buttons are disabled and a press is dropped.
READY_ID = ("(document.getElementById('success').disabled ? null"
            " : document.getElementById('item-id').dataset.id)")


def flags():
    return {f["id"]: f["success"] for f in jsonl(os.path.join(labels_dir, "sim_flags.jsonl"))}


class Chromium:
    """Headless Chromium through Selenium and Debian's chromedriver."""

    def __init__(self, url):
        opts = webdriver.ChromeOptions()
        opts.binary_location = "/usr/bin/chromium"
        for a in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                  "--disable-gpu", "--window-size=1280,900", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--disable-default-apps",
                  "--proxy-server=127.0.0.1:9"]:
            opts.add_argument(a)
        self.d = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
        self.d.get(url)
        self.body = self.d.find_element(By.TAG_NAME, "body")

    def current(self):
        return self.d.execute_script("return " + READY_ID)

    def key(self, k):
        self.body.send_keys(k)

    def click(self, element_id):
        self.d.find_element(By.ID, element_id).click()

    def shot(self, name):
        self.d.save_screenshot(os.path.join(ART, name))

    def leave(self):
        self.d.get("about:blank")

    def quit(self):
        self.d.quit()


class Firefox:
    """Headless Firefox through its built-in WebDriver BiDi endpoint."""

    def __init__(self, url):
        self.profile = tempfile.mkdtemp(prefix="wmrl-ff-")
        prefs = {
            "network.proxy.type": 1, "network.proxy.http": "127.0.0.1",
            "network.proxy.http_port": 9, "network.proxy.ssl": "127.0.0.1",
            "network.proxy.ssl_port": 9, "network.dns.disablePrefetch": True,
            "network.captive-portal-service.enabled": False,
            "network.connectivity-service.enabled": False,
            "app.normandy.enabled": False,
            "messaging-system.rsexperimentloader.enabled": False,
            "datareporting.policy.dataSubmissionEnabled": False,
            "toolkit.telemetry.enabled": False,
        }
        with open(os.path.join(self.profile, "user.js"), "w") as f:
            for k, v in prefs.items():
                f.write(f"user_pref({json.dumps(k)}, {json.dumps(v)});\n")
        port = free_port()
        self.proc = subprocess.Popen(
            ["firefox-esr", "--headless", "--no-remote", "--profile", self.profile,
             f"--remote-debugging-port={port}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(ROOT, "firefox.log"), "w"))
        procs.append(self.proc)
        self.ws = wait_for("Firefox's BiDi endpoint", lambda: self._connect(port), timeout=60, every=0.5)
        self.n = 0
        self.call("session.new", {"capabilities": {}})
        self.ctx = self.call("browsingContext.getTree", {})["contexts"][0]["context"]
        self.call("browsingContext.setViewport",
                  {"context": self.ctx, "viewport": {"width": 1280, "height": 800}})
        self.call("browsingContext.navigate", {"context": self.ctx, "url": url, "wait": "complete"})

    @staticmethod
    def _connect(port):
        try:
            return websocket.create_connection(f"ws://127.0.0.1:{port}/session",
                                               timeout=30, suppress_origin=True)
        except (OSError, websocket.WebSocketException):
            return None

    def call(self, method, params):
        self.n += 1
        self.ws.send(json.dumps({"id": self.n, "method": method, "params": params}))
        while True:
            m = json.loads(self.ws.recv())
            if m.get("id") == self.n:
                assert m.get("type") == "success", m
                return m["result"]

    def eval(self, expr):
        r = self.call("script.evaluate", {"expression": expr, "awaitPromise": False,
                                          "target": {"context": self.ctx}})
        return r["result"].get("value")

    def current(self):
        return self.eval(READY_ID)

    def key(self, k):
        self.call("input.performActions", {"context": self.ctx, "actions": [
            {"type": "key", "id": "kb", "actions": [
                {"type": "keyDown", "value": k}, {"type": "keyUp", "value": k}]}]})

    def click(self, element_id):
        # Into view first: the counts and plots grow the page as labels come
        # in, and a pointer outside the viewport clicks nothing.
        box = self.eval(f"(() => {{ const e = document.getElementById('{element_id}');"
                        " e.scrollIntoView({block: 'center'});"
                        " const r = e.getBoundingClientRect();"
                        " return [r.x + r.width / 2, r.y + r.height / 2]; })()")
        x, y = (int(v["value"]) for v in box)
        self.call("input.performActions", {"context": self.ctx, "actions": [
            {"type": "pointer", "id": "mouse", "parameters": {"pointerType": "mouse"},
             "actions": [{"type": "pointerMove", "x": x, "y": y},
                         {"type": "pointerDown", "button": 0},
                         {"type": "pointerUp", "button": 0}]}]})

    def shot(self, name):
        data = self.call("browsingContext.captureScreenshot", {"context": self.ctx})["data"]
        with open(os.path.join(ART, name), "wb") as f:
            f.write(base64.b64decode(data))

    def quit(self):
        try:
            self.call("browser.close", {})
        except Exception:  # already gone
            pass
        self.proc.wait(timeout=30)
        shutil.rmtree(self.profile, ignore_errors=True)


chromium = firefox = None
try:
    t0 = time.time()
    trainer = start_trainer(resume=False)
    wait_for("the run's run.toml",
             lambda: os.path.exists(os.path.join(human_dir, "run.toml")))
    server, url = start_server()
    chromium = Chromium(url + "?labeller=tester")
    page = chromium
    d = chromium.d

    done = []           # ids labelled, in order
    restarted = False
    undone = unsure = scrubbed = False
    while len(done) < STEPS * 4:
        # The page moves on after the label is on disk: never back to one.
        rid = wait_for("a new rollout on the page",
                       lambda: (c := page.current()) and c not in done and c, timeout=240)
        truth = wait_for(f"the hidden flag of {rid}", lambda: rid in flags() and flags())[rid]
        key, button = ("s", "success") if truth else ("f", "failure")
        if not scrubbed:
            # Scrub with the keyboard, then drag the slider with the mouse.
            for _ in range(60):
                chromium.body.send_keys(Keys.ARROW_LEFT)
            for _ in range(3):
                chromium.body.send_keys(Keys.ARROW_RIGHT)
            n = int(d.find_element(By.ID, "frame-no").text.split(" / ")[1])
            assert d.find_element(By.ID, "frame-no").text == f"{min(4, n)} / {n}"
            slider = d.find_element(By.ID, "scrub")
            ActionChains(d).click_and_hold(slider).move_by_offset(40, 0).release().perform()
            d.find_element(By.ID, "speed").send_keys("2")
            d.find_element(By.ID, "instruction").click()
            time.sleep(0.3)
            page.shot("label-page.png")
            scrubbed = True
        if page is firefox and len(done) == 8:
            time.sleep(1.0)
            page.shot("label-page-firefox.png")
        if len(done) == 7:
            # Mid-run, after the restart: counts and plots filled in (the
            # picture in docs/labels.md).
            time.sleep(3.5)
            page.shot("label-page-labelling.png")
        if not undone:
            # A wrong label, undone with Z: the same rollout comes back.
            page.key("f" if truth else "s")
            wait_for("the next page state", lambda: page.current() != rid)
            page.key("z")
            wait_for("the undone rollout back", lambda: page.current() == rid)
            undone = True
        elif not unsure and len(done) % 4 == 1:
            # Unsure sends it back to the queue; it returns after the others.
            page.click("unsure")
            wait_for("another rollout", lambda: page.current() != rid)
            unsure = True
            continue
        if len(done) % 2 == 0:
            page.key(key)
        else:
            page.click(button)
        who = "firefox" if page is firefox else "tester"

        def recorded():
            return any(r["id"] == rid and r["label"] == button and r["labeller"] == who
                       for r in jsonl(os.path.join(labels_dir, "labels.jsonl")))
        try:
            wait_for(f"{rid} recorded", recorded, timeout=30)
        except SystemExit:
            # A press the page never saw (it still shows the rollout, nothing
            # on disk) is pressed again; the page moves on once the label is
            # on disk, so a second press cannot label twice.
            assert page.current() == rid and not recorded(), f"{rid} left the page unrecorded"
            log(f"{rid}: no label after 30 s; pressing again")
            if len(done) % 2 == 0:
                page.key(key)
            else:
                page.click(button)
            wait_for(f"{rid} recorded", recorded)
        done.append(rid)
        log(f"{who} labelled {rid} {button} ({len(done)}/{STEPS * 4})")
        if len(done) == 6 and not restarted:
            # Step 0's four labels are used, two of step 1's are given: kill
            # the trainer and the page server, restart both; the page stays.
            wait_for("step 1 queued", lambda: len(jsonl(os.path.join(labels_dir, "queue.jsonl"))) >= 8)
            kill(trainer)
            kill(server)
            time.sleep(2.5)
            page.shot("label-page-server-down.png")
            trainer = start_trainer(resume=True)
            server, _ = start_server()
            restarted = True
            log("trainer and page server restarted")
        if len(done) == 8:
            # The last step in Firefox.
            chromium.leave()
            firefox = Firefox(url + "?labeller=firefox")
            page = firefox
            log(f"Firefox takes over ({time.time() - t0:.0f} s in)")
    page.shot("label-page-done.png")
    rc = trainer.wait(timeout=max(1, DEADLINE - time.time()))
    assert rc == 0, f"the human-label run failed ({rc}); see {ROOT}/trainer.log"
    time.sleep(3.5)  # one refresh of the counts and plots
    page.shot("label-page-finished.png")
    log(f"human-label run with the browsers: {time.time() - t0:.0f} s")
finally:
    for b in [chromium, firefox]:
        if b is not None:
            b.quit()
    for p in procs:
        if p.poll() is None:
            kill(p)

# Nothing lost, nothing twice.
consumed = jsonl(os.path.join(labels_dir, "consumed.jsonl"))
ids = [c["id"] for c in consumed]
assert len(ids) == len(set(ids)) == STEPS * 4, ids
fl = flags()
assert all((c["label"] == "success") == fl[c["id"]] for c in consumed), "a label differs from the flag"
records = jsonl(os.path.join(labels_dir, "labels.jsonl"))
assert sum(r["label"] == "retract" for r in records) == 1, records
assert all(r["seconds_to_label"] >= 0 for r in records)
assert sum(r["labeller"] == "firefox" for r in records) == 4, records


def strip(v):
    if isinstance(v, dict):
        return {k: strip(x) for k, x in v.items() if "seconds" not in k}
    if isinstance(v, list):
        return [strip(x) for x in v]
    return v


for name in ["metrics.jsonl", "eval.jsonl"]:
    a = [strip(x) for x in jsonl(os.path.join(sim_dir, name))]
    b = [strip(x) for x in jsonl(os.path.join(human_dir, name))]
    assert a == b, f"{name} differs between simulator and human labels"
with open(os.path.join(sim_dir, "summary.json")) as f:
    sa = strip(json.load(f))
with open(os.path.join(human_dir, "summary.json")) as f:
    sb = strip(json.load(f))
assert sa == sb, "summary.json differs between simulator and human labels"
assert sb["ledger"]["labels"] == STEPS * 4, sb["ledger"]
log(f"same metrics as the simulator-label run; {len(ids)} labels, each used once; "
    f"screenshots in {ART}")
