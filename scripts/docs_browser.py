"""Open the built manual in headless Chromium, as a reader would from disk: check that every page
loads with no failed request and no request leaving the machine, and take the screenshots the
README links (``python scripts/docs_browser.py screenshots site/``).

Chromium is driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``: JSON
messages separated by NUL bytes on file descriptors 3 and 4), so nothing but Chromium itself is
needed, and no port is opened. Host names resolve to nothing (``--host-resolver-rules``): a page
that tried to fetch a font or a script from a CDN would show up as a failed, external request.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

LOCAL_SCHEMES = ("file:", "data:", "blob:", "about:", "chrome-error:")


def _high(fd: int) -> int:
    """``fd`` moved to a number above 9, so that it cannot be the child's 3 or 4 itself."""
    import fcntl

    high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return high


def chromium_binary() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


@dataclass
class PageLoad:
    """What one page load did: every URL requested, the failures, the errors of its scripts."""

    url: str
    requests: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # "url: reason"
    errors: list[str] = field(default_factory=list)  # uncaught exceptions, console errors
    loaded: bool = False
    _urls: dict[str, str] = field(default_factory=dict, repr=False)  # request id -> URL

    @property
    def external(self) -> list[str]:
        return [u for u in self.requests if not u.startswith(LOCAL_SCHEMES)]

    def problems(self) -> list[str]:
        out = [] if self.loaded else ["no load event"]
        out += [f"failed request {f}" for f in self.failed]
        out += [f"external request {u}" for u in self.external]
        out += [f"error {e}" for e in self.errors]
        return out


class Browser:
    """Headless Chromium with one tab, driven over the DevTools pipe."""

    def __init__(self, width: int = 1280, height: int = 900, binary: str | None = None) -> None:
        binary = binary or chromium_binary()
        if binary is None:
            raise FileNotFoundError("Chromium is not installed (Debian: apt-get install chromium)")
        to_browser_r, self._to_browser = map(_high, os.pipe())
        self._from_browser, from_browser_w = map(_high, os.pipe())
        self._profile = tempfile.mkdtemp(prefix="muppets-chromium-")
        args = [binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--disable-extensions", "--disable-background-networking", "--disable-sync",
                "--disable-component-update", "--disable-default-apps", "--no-default-browser-check",
                "--host-resolver-rules=MAP * ~NOTFOUND", f"--user-data-dir={self._profile}",
                f"--window-size={width},{height}", "--hide-scrollbars", "--remote-debugging-pipe",
                "about:blank"]
        # the pipe's ends become the child's descriptors 3 (commands in) and 4 (replies out)
        shell = f'exec "$@" 3<&{to_browser_r} 4>&{from_browser_w} {to_browser_r}<&- {from_browser_w}>&-'
        self.proc = subprocess.Popen(["bash", "-c", shell, "_", *args], pass_fds=(to_browser_r, from_browser_w),
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self._events: list[dict] = []
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Network", "Runtime", "Log"):
            self.call(f"{domain}.enable", session=True)
        self.call("Network.setCacheDisabled", session=True, cacheDisabled=True)

    # -- protocol ------------------------------------------------------------------------------

    def _send(self, message: dict) -> None:
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")

    def _read(self, timeout: float) -> dict | None:
        import select

        while b"\0" not in self._buffer:
            ready, _, _ = select.select([self._from_browser], [], [], timeout)
            if not ready:
                return None
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise ConnectionError("Chromium closed the DevTools pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method: str, session: bool = False, timeout: float = 60.0, **params) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = self.session
        self._send(message)
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read(max(0.0, deadline - time.monotonic()))
            if reply is None:
                raise TimeoutError(f"{method}: no reply within {timeout} s")
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self._events.append(reply)

    def events(self, quiet: float, timeout: float) -> list[dict]:
        """The events received so far and until nothing arrives for ``quiet`` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            event = self._read(quiet)
            if event is None:
                break
            self._events.append(event)
        events, self._events = self._events, []
        return events

    # -- pages ---------------------------------------------------------------------------------

    def load(self, url: str, quiet: float = 0.3, timeout: float = 30.0, after_load: float = 5.0) -> PageLoad:
        """Navigate to ``url`` and record what the page requested and what failed: every event until
        its load event, then until nothing arrives for ``quiet`` seconds (what its scripts fetch
        after the load event, for up to ``after_load`` seconds). No load event within ``timeout``
        seconds is a problem of its own."""
        self.events(0.0, 0.0)  # drop what the previous page left
        result = PageLoad(url)
        self.call("Page.navigate", session=True, url=url)
        deadline = time.monotonic() + timeout
        while not result.loaded:
            event = self._events.pop(0) if self._events else self._read(max(0.0, deadline - time.monotonic()))
            if event is None:
                return result
            self._collect([event], result)
        self._collect(self.events(quiet, after_load), result)
        return result

    @staticmethod
    def _collect(events: list[dict], result: PageLoad) -> None:
        urls = result._urls
        for event in events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Network.requestWillBeSent":
                urls[params["requestId"]] = params["request"]["url"]
                result.requests.append(params["request"]["url"])
            elif method == "Network.loadingFailed":
                url = urls.get(params["requestId"], params["requestId"])
                if not params.get("canceled"):
                    result.failed.append(f"{url}: {params.get('errorText')}")
            elif method == "Network.responseReceived":
                status = params["response"].get("status", 0)
                if status >= 400:
                    result.failed.append(f"{params['response']['url']}: HTTP {status}")
            elif method == "Page.loadEventFired":
                result.loaded = True
            elif method == "Runtime.exceptionThrown":
                details = params["exceptionDetails"]
                result.errors.append(details.get("exception", {}).get("description") or details.get("text", ""))
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                result.errors.append(f"{params['entry'].get('url', '')}: {params['entry'].get('text')}")

    def screenshot(self, url: str, out: Path) -> None:
        self.load(url)
        data = self.call("Page.captureScreenshot", session=True, format="png")["data"]
        import base64

        out.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        try:
            self._send({"id": 0, "method": "Browser.close"})
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        finally:
            os.close(self._to_browser)
            os.close(self._from_browser)
            shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def site_pages(site: Path) -> list[Path]:
    """Every HTML page of a built site, but ``404.html``: a web server's page for a missing URL,
    it names its assets from the site's root, which a file:// URL cannot have."""
    return sorted(p for p in site.rglob("*.html")
                  if "assets" not in p.relative_to(site).parts and p.relative_to(site) != Path("404.html"))


# The README's screenshots: (page of the built site, picture under docs/images/screenshots/).
SCREENSHOTS = [("index.html", "home.png"), ("tutorials/weak-supervision.html", "tutorial-weak-supervision.png"),
               ("tutorials/pretrain-bert.html", "tutorial-pretrain-bert.png")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="load every page of a built site; list the problems")
    check.add_argument("site", type=Path)
    shots = sub.add_parser("screenshots", help="write the README's screenshots from a built site")
    shots.add_argument("site", type=Path)
    shots.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "docs/images/screenshots")
    args = parser.parse_args(argv)
    with Browser() as browser:
        if args.command == "check":
            bad = 0
            for page in site_pages(args.site):
                problems = browser.load(page.resolve().as_uri()).problems()
                bad += bool(problems)
                for p in problems:
                    print(f"{page.relative_to(args.site)}: {p}")
            print(f"{len(site_pages(args.site))} pages, {bad} with problems")
            return int(bad > 0)
        args.out.mkdir(parents=True, exist_ok=True)
        for page, name in SCREENSHOTS:
            browser.screenshot((args.site / page).resolve().as_uri(), args.out / name)
            print(args.out / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
