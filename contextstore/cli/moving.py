"""``export`` and ``import``: move windows between Redis servers as snapshot files, one JSON file
per window (the file name is the window id, percent-encoded), with a progress bar."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from ..errors import ContextStoreError
from .app import BadInput, CommandFailed, Env, cli, pass_env
from .editing import read_snapshot

#: what every snapshot file's name ends with
SUFFIX = ".json"


def snapshot_file(directory: Path, window_id: str) -> Path:
    """The file ``export`` writes a window to (ids may hold ``/`` and ``:``: percent-encoded)."""
    return directory / (quote(window_id, safe="") + SUFFIX)


def _progress() -> Progress:
    """A progress bar on stderr (stdout stays free for scripts)."""
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[window]}"))
    return Progress(*columns, console=Console(stderr=True))


@cli.command("export")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.argument("windows", nargs=-1, metavar="[WINDOW]...")
@click.option("--all", "every", is_flag=True, help="every window under the prefix")
@click.option("--force", is_flag=True, help="overwrite snapshot files that exist (default: refuse)")
@pass_env
def export(env: Env, directory: Path, windows: tuple[str, ...], every: bool, force: bool) -> None:
    """Write windows to DIRECTORY, one file each.

    Name the windows, or pass --all for every window under the prefix. Files that exist are
    refused (nothing is written) unless --force."""
    if every == bool(windows):
        raise BadInput("name the windows to export, or pass --all (not both)")
    store = env.store()
    handles = [store.window(wid, create=False) for wid in (store.windows() if every else windows)]
    existing = [str(f) for f in (snapshot_file(directory, w.window_id) for w in handles) if f.exists()]
    if existing and not force:
        raise CommandFailed(f"files exist: {', '.join(existing)} (pass --force to overwrite them)")
    directory.mkdir(parents=True, exist_ok=True)
    with _progress() as bar:
        task = bar.add_task("export", total=len(handles), window="")
        for win in handles:
            bar.update(task, window=win.window_id)
            target = snapshot_file(directory, win.window_id)
            partial = target.with_name(target.name + ".part")
            with partial.open("wb") as fp:  # a page of items at a time: bounded memory
                win.write_snapshot(fp)
                fp.write(b"\n")
            partial.replace(target)
            bar.advance(task)
    click.echo(f"exported {len(handles)} windows to {directory}", err=True)


@cli.command("import")
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="replace windows that already exist (default: refuse)")
@pass_env
def import_(env: Env, directory: Path, force: bool) -> None:
    """Restore every snapshot file in DIRECTORY.

    Each goes into the window it was exported from; existing windows are refused unless
    --force. Every file is checked before anything is written."""
    files = sorted(directory.glob("*" + SUFFIX))
    snaps = [read_snapshot(f) for f in files]
    store = env.store()
    for f, snap in zip(files, snaps, strict=True):  # every file checked whole before anything is written
        try:
            store.handle(snap.window_id).restore(snap, dry_run=True)
        except ContextStoreError as exc:
            raise BadInput(f"{f}: {exc}") from None
    if not force:
        existing = set(store.windows())
        taken = [s.window_id for s in snaps if s.window_id in existing]
        if taken:
            raise CommandFailed(f"windows already exist: {', '.join(taken)} (pass --force to replace them)")
    with _progress() as bar:
        task = bar.add_task("import", total=len(snaps), window="")
        for snap in snaps:
            bar.update(task, window=snap.window_id)
            store.handle(snap.window_id).restore(snap)
            bar.advance(task)
    click.echo(f"imported {len(snaps)} windows from {directory}", err=True)
