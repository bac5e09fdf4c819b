"""The label page in a real browser (scripts/checks.d/60-labels.sh).

A short run on the embedded simulator takes its anchor labels from people
(`labels.source = "human"`); headless Chromium, driven through Selenium and
Debian's chromedriver, labels every anchor rollout on the page with the
keyboard and the mouse, reading the answer from the simulator's hidden flag
(labels/sim_flags.jsonl, which the page server never reads). Half-way the
trainer and the page server are killed and restarted while the page stays
open. The run must end with the same metrics as the same run with the
simulator's labels (wall-clock fields aside), with every label recorded once.

    python3 scripts/lib/label_page_test.py BIN ROOT ARTIFACTS
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time

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
                          "--bind", f"127.0.0.1:{PORT}"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    procs.append(p)
    line = p.stdout.readline()
    assert "label page for" in line, line
    return p, line.split(": ", 1)[1].strip()


def kill(p):
    p.send_signal(signal.SIGKILL)
    p.wait()


def flags():
    return {f["id"]: f["success"] for f in jsonl(os.path.join(labels_dir, "sim_flags.jsonl"))}


opts = webdriver.ChromeOptions()
opts.binary_location = "/usr/bin/chromium"
for a in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
          "--disable-gpu", "--window-size=1280,900"]:
    opts.add_argument(a)
driver = None
try:
    t0 = time.time()
    trainer = start_trainer(resume=False)
    wait_for("the run's config.toml",
             lambda: os.path.exists(os.path.join(human_dir, "config.toml")))
    server, url = start_server()
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
    driver.get(url + "?labeller=tester")
    body = driver.find_element(By.TAG_NAME, "body")

    def current():
        return driver.find_element(By.ID, "item-id").get_attribute("data-id")

    def shot(name):
        driver.save_screenshot(os.path.join(ART, name))

    done = []           # ids labelled, in order
    restarted = False
    undone = unsure = scrubbed = False
    while len(done) < STEPS * 4:
        # The page moves on after the label is on disk: never back to one.
        rid = wait_for("a new rollout on the page",
                       lambda: (c := current()) and c not in done and c, timeout=240)
        truth = wait_for(f"the hidden flag of {rid}", lambda: rid in flags() and flags())[rid]
        key, button = ("s", "success") if truth else ("f", "failure")
        if not scrubbed:
            # Scrub with the keyboard, then drag the slider with the mouse.
            for _ in range(60):
                body.send_keys(Keys.ARROW_LEFT)
            for _ in range(3):
                body.send_keys(Keys.ARROW_RIGHT)
            n = int(driver.find_element(By.ID, "frame-no").text.split(" / ")[1])
            assert driver.find_element(By.ID, "frame-no").text == f"{min(4, n)} / {n}"
            slider = driver.find_element(By.ID, "scrub")
            ActionChains(driver).click_and_hold(slider).move_by_offset(40, 0).release().perform()
            driver.find_element(By.ID, "speed").send_keys("2")
            driver.find_element(By.ID, "instruction").click()
            time.sleep(0.3)
            shot("label-page.png")
            scrubbed = True
        if len(done) == 7:
            # Mid-run, after the restart: counts and plots filled in (the
            # picture in docs/labels.md).
            time.sleep(3.5)
            shot("label-page-labelling.png")
        if not undone:
            # A wrong label, undone with Z: the same rollout comes back.
            body.send_keys("f" if truth else "s")
            wait_for("the next page state", lambda: current() != rid)
            body.send_keys("z")
            wait_for("the undone rollout back", lambda: current() == rid)
            undone = True
        elif not unsure and len(done) % 4 == 1:
            # Unsure sends it back to the queue; it returns after the others.
            driver.find_element(By.ID, "unsure").click()
            wait_for("another rollout", lambda: current() != rid)
            unsure = True
            continue
        if len(done) % 2 == 0:
            body.send_keys(key)
        else:
            driver.find_element(By.ID, button).click()
        wait_for(f"{rid} recorded", lambda: any(
            r["id"] == rid and r["label"] == button
            for r in jsonl(os.path.join(labels_dir, "labels.jsonl"))))
        done.append(rid)
        log(f"labelled {rid} {button} ({len(done)}/{STEPS * 4})")
        if len(done) == 6 and not restarted:
            # Step 0's four labels are used, two of step 1's are given: kill
            # the trainer and the page server, restart both; the page stays.
            wait_for("step 1 queued", lambda: len(jsonl(os.path.join(labels_dir, "queue.jsonl"))) >= 8)
            kill(trainer)
            kill(server)
            time.sleep(2.5)
            shot("label-page-server-down.png")
            trainer = start_trainer(resume=True)
            server, _ = start_server()
            restarted = True
            log("trainer and page server restarted")
    shot("label-page-done.png")
    rc = trainer.wait(timeout=max(1, DEADLINE - time.time()))
    assert rc == 0, f"the human-label run failed ({rc}); see {ROOT}/trainer.log"
    time.sleep(3.5)  # one refresh of the counts and plots
    shot("label-page-finished.png")
    log(f"human-label run with the browser: {time.time() - t0:.0f} s")
finally:
    if driver is not None:
        driver.quit()
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
assert all(r["labeller"] == "tester" and r["seconds_to_label"] >= 0 for r in records)


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
