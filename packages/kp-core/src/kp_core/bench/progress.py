"""A progress bar for long runs: rich when installed, plain numbered lines otherwise."""
from __future__ import annotations

import contextlib
from typing import Iterator


class _Plain:
    def __init__(self, total: int):
        self.total, self.done = total, 0

    def describe(self, text: str) -> None:
        print(f"[{self.done + 1}/{self.total}] {text}", flush=True)

    def advance(self) -> None:
        self.done += 1

    def log(self, text: str) -> None:
        print(text, flush=True)


class _Rich:
    def __init__(self, progress, total: int):
        self._p = progress
        self._task = progress.add_task("", total=total)

    def describe(self, text: str) -> None:
        self._p.update(self._task, description=text)

    def advance(self) -> None:
        self._p.advance(self._task)

    def log(self, text: str) -> None:
        # Printed above the live bar, so the finished rows stay in the scrollback and in logs.
        self._p.console.print(text, highlight=False, markup=False, soft_wrap=True)


@contextlib.contextmanager
def progress(total: int) -> Iterator[_Plain | _Rich]:
    try:
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                   TimeElapsedColumn)
    except ImportError:
        yield _Plain(total)
        return
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    with Progress(*columns) as p:
        yield _Rich(p, total)
