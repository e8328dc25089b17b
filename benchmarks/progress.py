"""A tiny progress bar on stderr (no dependency)."""

import sys
import time


class Progress:
    """``with Progress(total) as bar: bar.step("label")``.

    On a terminal the bar redraws in place; elsewhere (a log, a notebook) it
    prints one line whenever the percentage passes another tenth.
    """

    def __init__(self, total, stream=None, enabled=True, width=30):
        self.total, self.done, self.width = max(total, 1), 0, width
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.tty = enabled and getattr(self.stream, "isatty", lambda: False)()
        self.start = time.perf_counter()
        self._last_tenth = -1
        self._shown = 0
        self._label = ""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def step(self, label=""):
        """Announce the item about to run (the count is of items finished)."""
        self._label = label
        self._draw(label)

    def advance(self):
        self.done = min(self.done + 1, self.total)
        self._draw(self._label)

    def write(self, message):
        """Print a line without garbling the bar."""
        if self.tty:
            self.stream.write("\r" + " " * self._shown + "\r")
        self.stream.write(message + "\n")
        self.stream.flush()

    def _draw(self, label):
        if not self.enabled:
            return
        fraction = self.done / self.total
        elapsed = time.perf_counter() - self.start
        filled = round(self.width * fraction)
        text = f"[{'#' * filled}{'.' * (self.width - filled)}] {self.done}/{self.total} {elapsed:5.0f}s {label}"
        if self.tty:
            text = text[:119]
            self.stream.write("\r" + text.ljust(self._shown))
            self._shown = len(text)
        else:
            tenth = int(fraction * 10)
            if tenth == self._last_tenth:
                return
            self._last_tenth = tenth
            self.stream.write(text + "\n")
        self.stream.flush()

    def close(self):
        if self.tty and self._shown:
            self.stream.write("\r" + " " * self._shown + "\r")
            self.stream.flush()
            self._shown = 0
