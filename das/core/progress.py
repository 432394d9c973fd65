"""What long work says while it runs: log messages and progress bars, both on stderr.

Every module logs through its own `logging.getLogger(__name__)` (under "das"); a library user sees
warnings (Python's default) and configures the rest as usual. The command line calls `configure`:
messages as plain lines on stderr, INFO by default, `-v` DEBUG (each level's and stage's details),
`-q` ERROR (errors only). `bar` is a tqdm progress bar with its rate and an estimate of the time left,
on stderr, shown only when stderr is a terminal (and not with `-q`), so a pipe or a log file gets the
messages alone; it fits any terminal width, and one that reports none (0 columns) is taken as 80.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import sys
import time

from tqdm import tqdm

_SETTINGS = {"bars": True}  # -q turns the bars off as well
FALLBACK_SIZE = (80, 24)  # a terminal that reports no size (0 columns or rows: a serial console, some CI runners)
NARROW = 60  # columns (beyond the description) below which a bar drops its counts and times to stay a bar


class _Lines(logging.Handler):
    """Each record as a line on the current sys.stderr, written around any progress bar on screen."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            tqdm.write(self.format(record), file=sys.stderr)
        except Exception:  # a logging handler never raises into the code that logs
            self.handleError(record)


class _Format(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        return text if record.levelno < logging.WARNING else f"{record.levelname}: {text}"


def configure(verbosity: int = 0) -> None:
    """The command line's logging: das's messages on stderr at INFO (-1, `-q`: errors only; 1, `-v`: DEBUG, the
    details of every level and stage); bars off at -1."""
    logger = logging.getLogger("das")
    for handler in [h for h in logger.handlers if isinstance(h, _Lines)]:
        logger.removeHandler(handler)
    handler = _Lines()
    handler.setFormatter(_Format("%(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.ERROR if verbosity < 0 else logging.DEBUG if verbosity > 0 else logging.INFO)
    logger.propagate = False
    _SETTINGS["bars"] = verbosity >= 0


def screen_size(stream=None) -> tuple[int, int]:
    """(columns, rows) a bar may use on `stream`'s terminal (default sys.stderr), one column and row short of it as
    tqdm draws: COLUMNS and LINES when set to a positive number, else the terminal's own size, and where either is
    unknown or 0, FALLBACK_SIZE's (a terminal reporting 0 columns would otherwise get an empty line, not a bar).

    >>> import io
    >>> screen_size(io.StringIO()) == (FALLBACK_SIZE[0] - 1, FALLBACK_SIZE[1] - 1) or "COLUMNS" in os.environ
    True
    """
    stream = sys.stderr if stream is None else stream
    try:
        columns, rows = os.get_terminal_size(stream.fileno())
    except (AttributeError, OSError, ValueError):  # not a terminal, or a stream without a file descriptor
        columns, rows = 0, 0
    columns = _positive(os.environ.get("COLUMNS")) or columns
    rows = _positive(os.environ.get("LINES")) or rows
    return (columns if columns > 0 else FALLBACK_SIZE[0]) - 1, (rows if rows > 0 else FALLBACK_SIZE[1]) - 1


def _positive(text: str | None) -> int:
    """An environment variable's positive integer, or 0 (unset, empty, not a number, 0 or less)."""
    try:
        return max(0, int(text or 0))
    except ValueError:
        return 0


class _Bar(tqdm):
    """tqdm's bar, narrowed to stay a bar: below NARROW spare columns it shows the percentage and the bar alone
    (tqdm would drop the bar first and print a cut line, or nothing)."""

    @staticmethod
    def format_meter(n, total, elapsed, *, ncols=None, prefix="", bar_format=None, **extra):  # tqdm passes keywords
        if total and ncols and bar_format is None and ncols < len(prefix) + NARROW:
            bar_format = "{percentage:3.0f}%|{bar}|" if ncols < len(prefix) + 20 else "{desc}: {percentage:3.0f}%|{bar}|"
        return tqdm.format_meter(n, total, elapsed, ncols=ncols, prefix=prefix, bar_format=bar_format, **extra)


def bar(iterable=None, *, total: int | float | None = None, desc: str = "", unit: str = "it",
        shown: bool = True, **options) -> tqdm:
    """A progress bar with rate and estimate on stderr: on a terminal only, from the main process only (a worker's
    part of the work is counted by its caller's bar), never with -q or shown=False. It follows the terminal's
    width as it changes (`screen_size`: 80 columns where the terminal reports none).

    >>> with bar(range(3), desc="steps", shown=False) as steps:
    ...     sum(steps)
    3
    """
    wanted = shown and _SETTINGS["bars"] and multiprocessing.parent_process() is None
    disable = None if wanted else True  # None: tqdm shows it only on a terminal
    columns, rows = screen_size(sys.stderr)
    progress = _Bar(iterable, total=total, desc=desc, unit=unit, file=sys.stderr, disable=disable, ncols=columns,
                    nrows=rows, **options)
    if not progress.disable:
        progress.dynamic_ncols = screen_size  # tqdm asks it again before each redraw (a resized window)
    progress.das_started = time.perf_counter()  # `step` estimates the time left from it when no bar is drawn
    return progress


def step(progress: tqdm, logger: logging.Logger, text: str, n: int = 1) -> None:
    """One item of `progress` done, and `text` about it logged: at DEBUG under a bar on screen (the bar says
    it), else at INFO as a line with the count and an estimate of the time left (a pipe or a log file)."""
    if not progress.disable:
        progress.update(n)
        logger.debug(text)
        return
    progress.n += n  # a bar not drawn counts nothing itself
    done, total = progress.n, progress.total
    elapsed = time.perf_counter() - getattr(progress, "das_started", time.perf_counter())
    left = f", about {_duration(elapsed / done * (total - done))} left" if total and done and done < total else ""
    logger.info(f"[{done}/{total}{left}] {text}" if total else text)


def _duration(seconds: float) -> str:
    """A duration as people say it: 42 s, 3 min, 1.5 h.

    >>> _duration(42.4), _duration(200), _duration(5400)
    ('42 s', '3 min', '1.5 h')
    """
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


@contextlib.contextmanager
def silenced():
    """Inside the block, das says only errors and draws no bar: work that runs many small releases (an audit's
    trials) counts them itself, and each release's own messages (its seeded-mode warning) would bury that."""
    logger = logging.getLogger("das")
    level, bars = logger.level, _SETTINGS["bars"]
    logger.setLevel(logging.ERROR)
    _SETTINGS["bars"] = False
    try:
        yield
    finally:
        logger.setLevel(level)
        _SETTINGS["bars"] = bars
