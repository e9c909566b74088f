"""A rich progress bar on stderr for long runs, shared by the commands; a no-op otherwise."""

from __future__ import annotations


class progress_bar:
    """A rich progress bar on stderr for long runs; a no-op otherwise."""

    def __init__(self, console, enabled: bool, label: str, total: int | None) -> None:
        self.console, self.enabled, self.label, self.total = console, enabled, label, total
        self.bar = None

    def __enter__(self):
        if not self.enabled:
            return lambda *a: None
        from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(), TimeElapsedColumn(),
                            console=self.console, transient=True)
        self.bar.start()
        task = self.bar.add_task(self.label, total=self.total)

        def tick(done: int, total: int | None, text: str | None) -> None:
            self.bar.update(task, completed=done, total=total, description=text or self.label)

        return tick

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()
