"""Opens one page in headless Chromium and reads it, for the export tests.

Chromium is driven over its DevTools pipe (file descriptors 3 and 4, one
JSON message per NUL-terminated line), so no port and no package beyond
Python's own library is needed. The request comes as JSON on stdin:

    {"url": ..., "ready": JS, "limit_secs": N, "eval": [JS, ...],
     "screenshot": PATH or null, "size": [W, H]}

`ready` is evaluated until it is true (or the limit passes); then each
`eval` expression is evaluated (promises awaited) and its value returned.
The answer is JSON on stdout: {"ready": bool, "values": [...], "text":
the page's text, "errors": the page's uncaught exceptions}.
"""

import base64
import json
import os
import subprocess
import sys
import tempfile
import time


class Browser:
    """One headless Chromium and its DevTools pipe."""

    def __init__(self, size):
        to_browser_r, to_browser_w = os.pipe()
        from_browser_r, from_browser_w = os.pipe()

        def pipes_at_3_and_4():
            # Moved high first: a pipe's own number may be 3 or 4.
            os.dup2(to_browser_r, 100)
            os.dup2(from_browser_w, 101)
            os.dup2(100, 3)
            os.dup2(101, 4)

        self.profile = tempfile.TemporaryDirectory()
        self.process = subprocess.Popen(
            [
                "/usr/lib/chromium/chromium",
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--remote-debugging-pipe",
                f"--window-size={size[0]},{size[1]}",
                f"--user-data-dir={self.profile.name}",
                "about:blank",
            ],
            close_fds=False,
            preexec_fn=pipes_at_3_and_4,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self.writer = os.fdopen(to_browser_w, "wb")
        self.reader = from_browser_r
        self.pending = b""
        self.next_id = 0
        self.session = None
        self.errors = []

    def call(self, method, params=None):
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if self.session is not None and not method.startswith("Target."):
            message["sessionId"] = self.session
        self.writer.write(json.dumps(message).encode() + b"\0")
        self.writer.flush()
        while True:
            while b"\0" not in self.pending:
                chunk = os.read(self.reader, 1 << 16)
                if not chunk:
                    raise SystemExit("chromium closed its DevTools pipe")
                self.pending += chunk
            raw, self.pending = self.pending.split(b"\0", 1)
            answer = json.loads(raw)
            if answer.get("method") == "Runtime.exceptionThrown":
                details = answer["params"]["exceptionDetails"]
                self.errors.append(details.get("exception", {}).get("description") or details.get("text"))
            if answer.get("id") == self.next_id:
                if "error" in answer:
                    raise SystemExit(f"{method}: {answer['error']}")
                return answer["result"]

    def open(self, url):
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        attached = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})
        self.session = attached["sessionId"]
        self.call("Runtime.enable")
        self.call("Page.navigate", {"url": url})

    def evaluate(self, expression):
        answer = self.call(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
        )
        if "exceptionDetails" in answer:
            details = answer["exceptionDetails"]
            return {"error": details.get("exception", {}).get("description") or details.get("text")}
        return answer.get("result", {}).get("value")

    def close(self):
        try:
            self.call("Browser.close")
        except SystemExit:
            pass
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()


def main():
    request = json.load(sys.stdin)
    browser = Browser(request.get("size", [1400, 900]))
    try:
        browser.open(request["url"])
        deadline = time.monotonic() + request.get("limit_secs", 60)
        ready = False
        while time.monotonic() < deadline:
            if browser.evaluate(request["ready"]) is True:
                ready = True
                break
            time.sleep(0.2)
        values = [browser.evaluate(e) for e in request.get("eval", [])] if ready else []
        text = browser.evaluate("document.body ? document.body.innerText : ''")
        if request.get("screenshot"):
            shot = browser.call("Page.captureScreenshot", {"format": "png"})["data"]
            with open(request["screenshot"], "wb") as out:
                out.write(base64.b64decode(shot))
        print(json.dumps({"ready": ready, "values": values, "text": text, "errors": browser.errors}))
    finally:
        browser.close()


main()
