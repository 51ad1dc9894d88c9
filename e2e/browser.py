#!/usr/bin/python3
"""A headless browser for the e2e scenarios: Debian's chromium driven over the DevTools Protocol.

    browser.py [--header 'Name: value']... [--screenshots DIR] [--width 1280 --height 900] [--mobile] < steps

A scenario pipes in steps, one a line (blank lines and # comments ignored, arguments split as a shell
would). Each step prints `ok: <step>`, or the run stops with exit 1 and a message naming the step,
what it expected and what it saw. A --header is sent with every request the page makes, as an OIDC
proxy would add a viewer's `Authorization: Bearer` token; --mobile emulates a 390x844 phone.

    open URL                    navigate and wait for the load event
    wait-text SELECTOR REGEX    until the first match of SELECTOR exists and its innerText matches REGEX
    wait-count SELECTOR N       until exactly N elements match SELECTOR
    wait-gone SELECTOR          until no element matches SELECTOR
    click SELECTOR              scroll it into view and click its center with real mouse events
    press KEY                   Enter, Tab, Escape or ' ' (Space), to the focused element
    focus SELECTOR              element.focus()
    type SELECTOR TEXT          focus it, then insert TEXT as typed
    mark / expect-mark          expect-mark fails if the page was reloaded or left since mark
    eval JS                     print the JSON value of JS (promises awaited)
    expect-eval JS JSON         fail unless JS evaluates to the JSON value
    screenshot NAME             the whole page as DIR/NAME.png (needs --screenshots DIR)
    sleep SECONDS               only to let an animation run before a screenshot

Every wait (open and wait-*) gives up after 30 s, or after N s with a trailing `--timeout N`.
A console error, an uncaught exception or a Content-Security-Policy violation on the page fails the
run at the end (exit 1) even when every step passed. Chromium runs with a fresh profile in a
temporary directory; both are gone when this exits, whatever the outcome.
"""

import argparse
import base64
import contextlib
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

try:
    import websocket  # Debian's python3-websocket, installed for /usr/bin/python3 only
except ImportError:
    if sys.executable != "/usr/bin/python3" and os.path.exists("/usr/bin/python3"):
        os.execv("/usr/bin/python3", ["/usr/bin/python3", __file__, *sys.argv[1:]])
    raise

DEFAULT_TIMEOUT = 30.0
KEYS = {  # key, code, windowsVirtualKeyCode, text
    "Enter": ("Enter", "Enter", 13, "\r"),
    "Tab": ("Tab", "Tab", 9, ""),
    "Escape": ("Escape", "Escape", 27, ""),
    " ": (" ", "Space", 32, " "),
}
KEYS["Space"] = KEYS[" "]
# The center of element e once scrolled into view, and what a click there would land on instead of e.
CLICK_TARGET = """(e.scrollIntoView({block: 'center', inline: 'center'}), (() => {
  const r = e.getBoundingClientRect(), x = r.left + r.width / 2, y = r.top + r.height / 2;
  const hit = document.elementFromPoint(x, y);
  return {x, y, w: r.width, h: r.height, covered: hit && !e.contains(hit) ? hit.outerHTML.slice(0, 200) : null};
})())"""


class Failure(Exception):
    pass


def start_chromium(profile, width, height):
    """Starts chromium on a port of its own choosing; returns the process and that port."""
    log = open(os.path.join(profile, "chromium.log"), "wb")
    proc = subprocess.Popen(
        ["chromium", "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--no-first-run", "--no-default-browser-check", f"--user-data-dir={profile}",
         "--remote-debugging-port=0", f"--window-size={width},{height}", "about:blank"],
        stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    port_file, deadline = os.path.join(profile, "DevToolsActivePort"), time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            with open(port_file) as f:
                port, newline, _ = f.read().partition("\n")  # the port, then the browser's path
            if newline:
                return proc, int(port)
        except FileNotFoundError:
            pass
        time.sleep(0.1)
    with open(log.name, errors="replace") as f:
        tail = f.read()[-2000:]
    raise Failure(f"chromium did not write {port_file} within 20 s (exit status {proc.poll()}):\n{tail}")


def page_websocket_url(port):
    deadline = time.monotonic() + 20
    while True:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as r:
            pages = [t for t in json.load(r) if t.get("type") == "page"]
        if pages:
            return pages[0]["webSocketDebuggerUrl"]
        if time.monotonic() > deadline:
            raise Failure("chromium has no page target after 20 s")
        time.sleep(0.1)


class Page:
    """One page target. Replies are matched to calls by id; events are handled as they are read."""

    def __init__(self, url):
        self.ws = websocket.create_connection(url, timeout=DEFAULT_TIMEOUT, suppress_origin=True)
        self.next_id, self.loaded, self.errors, self.notes, self.step = 0, set(), [], [], "start"

    def call(self, method, timeout=DEFAULT_TIMEOUT, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while True:
            msg = self.read(deadline, f"the answer to {method} ({timeout:g} s)")
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise Failure(f"{method} failed: {msg['error'].get('message')}")
                return msg["result"]

    def read(self, deadline, waiting_for):
        self.ws.settimeout(max(deadline - time.monotonic(), 0.01))
        try:
            msg = json.loads(self.ws.recv())
        except websocket.WebSocketTimeoutException:
            raise Failure(f"timed out waiting for {waiting_for}") from None
        except (websocket.WebSocketConnectionClosedException, ConnectionError):
            raise Failure("chromium closed the DevTools connection (crashed?)") from None
        if "method" in msg:
            self.event(msg["method"], msg.get("params", {}))
        return msg

    def event(self, method, p):
        error = None
        if method == "Page.lifecycleEvent" and p.get("name") == "load":
            self.loaded.add(p.get("loaderId"))
        elif method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            text = " ".join(str(a.get("value", a.get("description", a.get("type")))) for a in p.get("args", []))
            error = f"console.{p['type']}: {text}"
        elif method == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails", {})
            text = d.get("exception", {}).get("description") or d.get("text")
            error = f"uncaught exception at {d.get('url', '?')}:{d.get('lineNumber', 0) + 1}: {text}"
        elif method == "Log.entryAdded" and p["entry"].get("level") == "error":
            e = p["entry"]  # a CSP violation is a "security" entry; a failed load a "network" one
            if e.get("source") == "network":  # a 401 may be the point of a step; only reported
                if not e.get("url", "").endswith("/favicon.ico"):
                    self.notes.append(f"[during `{self.step}`] {e.get('url')}: {e.get('text')}")
            else:
                error = f"{e.get('source')} error: {e.get('text')} ({e.get('url', '')})"
        if error:
            self.errors.append(f"[during `{self.step}`] {error}")

    def evaluate(self, js, timeout=DEFAULT_TIMEOUT):
        r = self.call("Runtime.evaluate", timeout, expression=js, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            d = r["exceptionDetails"]
            raise Failure(f"{js!r} threw: {d.get('exception', {}).get('description') or d.get('text')}")
        return r["result"].get("value")

    def poll(self, js, done, timeout, expected):
        deadline = time.monotonic() + timeout
        while True:
            seen = self.evaluate(js, timeout)
            if done(seen):
                return
            if time.monotonic() > deadline:
                raise Failure(f"expected {expected} within {timeout:g} s; saw {seen!r}")
            time.sleep(0.2)

    def element(self, selector, js):
        """Runs `js` with `e` bound to the first element matching selector; fails if there is none."""
        value = self.evaluate(f"(() => {{ const e = document.querySelector({json.dumps(selector)});"
                              f" return e ? {{found: true, v: {js}}} : {{found: false}}; }})()")
        if not value["found"]:
            raise Failure(f"no element matches {selector!r}")
        return value["v"]


def run_step(page, args, timeout, screenshots, state):
    cmd, args, n = args[0], args[1:], len(args) - 1
    usage = {"open": 1, "wait-text": 2, "wait-count": 2, "wait-gone": 1, "click": 1, "press": 1,
             "focus": 1, "type": 2, "mark": 0, "expect-mark": 0, "eval": 1, "expect-eval": 2,
             "screenshot": 1, "sleep": 1}
    if cmd not in usage:
        raise Failure(f"unknown step {cmd!r} (known: {', '.join(usage)})")
    if n != usage[cmd]:
        raise Failure(f"{cmd} takes {usage[cmd]} argument(s), got {n}: {args} (quote arguments with spaces)")
    sel = json.dumps(args[0]) if args else ""
    if cmd == "open":
        deadline = time.monotonic() + timeout
        nav = page.call("Page.navigate", timeout, url=args[0])  # answers once the server answered
        if nav.get("errorText"):
            raise Failure(f"navigation to {args[0]} failed: {nav['errorText']}")
        while nav.get("loaderId") and nav["loaderId"] not in page.loaded:  # same-document: no load
            page.read(deadline, f"the load event of {args[0]} ({timeout:g} s)")
    elif cmd == "wait-text":
        pattern = re.compile(args[1])
        page.poll(f"(() => {{ const e = document.querySelector({sel}); return e ? e.innerText : null; }})()",
                  lambda t: t is not None and pattern.search(t) is not None, timeout,
                  f"an element {args[0]!r} whose text matches /{args[1]}/")
    elif cmd == "wait-count":
        page.poll(f"document.querySelectorAll({sel}).length", lambda c: c == int(args[1]), timeout,
                  f"{args[1]} element(s) matching {args[0]!r}")
    elif cmd == "wait-gone":
        page.poll(f"document.querySelectorAll({sel}).length", lambda c: c == 0, timeout,
                  f"no element matching {args[0]!r}")
    elif cmd == "click":
        at = page.element(args[0], CLICK_TARGET)
        if not at["w"] or not at["h"]:
            raise Failure(f"{args[0]!r} is not visible (its box is {at['w']}x{at['h']})")
        if at["covered"]:
            raise Failure(f"{args[0]!r} is covered at its center by {at['covered']}")
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            extra = {} if kind == "mouseMoved" else {"button": "left", "clickCount": 1}
            page.call("Input.dispatchMouseEvent", type=kind, x=at["x"], y=at["y"], **extra)
    elif cmd == "press":
        if args[0] not in KEYS:
            raise Failure(f"unknown key {args[0]!r} (known: Enter, Tab, Escape, ' ')")
        key, code, vk, text = KEYS[args[0]]
        fields = dict(key=key, code=code, windowsVirtualKeyCode=vk, nativeVirtualKeyCode=vk)
        page.call("Input.dispatchKeyEvent", type="keyDown", text=text, unmodifiedText=text, **fields)
        page.call("Input.dispatchKeyEvent", type="keyUp", **fields)
    elif cmd in ("focus", "type"):
        page.element(args[0], "(e.focus(), null)")
        if cmd == "type":
            page.call("Input.insertText", text=args[1])
    elif cmd == "mark":
        state["mark"] = secrets.token_hex(8)
        page.evaluate(f"window.__e2eMark = {json.dumps(state['mark'])}")
    elif cmd == "expect-mark":
        if "mark" not in state:
            raise Failure("expect-mark without a mark step before it")
        seen = page.evaluate("window.__e2eMark")
        if seen != state["mark"]:
            raise Failure(f"expected window.__e2eMark {state['mark']!r} (no reload since mark); saw {seen!r}")
    elif cmd == "eval":
        print(json.dumps(page.evaluate(args[0], timeout)))
    elif cmd == "expect-eval":
        expected, seen = json.loads(args[1]), page.evaluate(args[0], timeout)
        if seen != expected:
            raise Failure(f"expected {json.dumps(expected)}; saw {json.dumps(seen)}")
    elif cmd == "screenshot":
        if not screenshots:
            raise Failure("screenshot needs --screenshots DIR")
        size = page.call("Page.getLayoutMetrics")["cssContentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
        shot = page.call("Page.captureScreenshot", timeout, format="png", captureBeyondViewport=True, clip=clip)
        path = os.path.join(screenshots, f"{args[0]}.png")
        with open(path, "wb") as f:
            f.write(base64.b64decode(shot["data"]))
    elif cmd == "sleep":  # only for the screenshot of an animation: every other step waits for a condition
        time.sleep(float(args[0]))


def header(text):
    name, colon, value = text.partition(":")
    if not colon or not name.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not 'Name: value'")
    return name.strip(), value.strip()


def main():
    parser = argparse.ArgumentParser(description="Drive headless chromium with steps read from stdin.")
    parser.add_argument("--header", action="append", default=[], type=header, help="'Name: value', on every request")
    parser.add_argument("--screenshots", help="directory for the screenshot step")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=900)
    parser.add_argument("--mobile", action="store_true", help="a 390x844 phone, device scale factor 2")
    opts = parser.parse_args()
    headers = dict(opts.header)
    if opts.screenshots:
        os.makedirs(opts.screenshots, exist_ok=True)

    # A scenario's timeout or Ctrl-C stops the run through the finally below, chromium included.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    profile, proc, page, step = tempfile.mkdtemp(prefix="e2e-chromium-"), None, None, "start"
    try:
        proc, port = start_chromium(profile, opts.width, opts.height)
        page = Page(page_websocket_url(port))
        for domain in ("Page", "Runtime", "Network", "Log"):
            page.call(f"{domain}.enable")
        page.call("Page.setLifecycleEventsEnabled", enabled=True)
        if headers:
            page.call("Network.setExtraHTTPHeaders", headers=headers)
        if opts.mobile:
            page.call("Emulation.setDeviceMetricsOverride", width=390, height=844, deviceScaleFactor=2, mobile=True)
        state = {}
        for line in sys.stdin:
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            step = page.step = line.strip()
            args, timeout = shlex.split(step), DEFAULT_TIMEOUT
            if len(args) >= 3 and args[-2] == "--timeout":
                args, timeout = args[:-2], float(args[-1])
            run_step(page, args, timeout, opts.screenshots, state)
            # What is typed may be a credential: the log names the field and the length only.
            shown = f"type {shlex.quote(args[1])} ({len(args[2])} characters)" if args[0] == "type" and len(args) == 3 else step
            print(f"ok: {shown}", flush=True)
        step = page.step = "end"
        page.evaluate("0")  # a round trip: every event chromium sent before it has been read
    except (Failure, ValueError, re.error, OSError) as e:
        print(f"FAIL: {step}: {e}", file=sys.stderr)
        report(page)
        return 1
    finally:
        if page:
            page.ws.close()
        if proc:
            stop(proc)
        shutil.rmtree(profile, ignore_errors=True)
    report(page)
    return 1 if page.errors else 0


def report(page):
    for note in page.notes if page else []:
        print(f"page note (not a failure): {note}", file=sys.stderr)
    for error in page.errors if page else []:
        print(f"page error: {error}", file=sys.stderr)


def stop(proc):
    """Kills chromium's whole process group, then waits (5 s at most) until init reaped its helpers."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    gone_by = time.monotonic() + 5
    with contextlib.suppress(ProcessLookupError):
        while time.monotonic() < gone_by:
            os.killpg(proc.pid, 0)  # fails once no process of the group is left
            time.sleep(0.1)


if __name__ == "__main__":
    sys.exit(main())
