"""Loading a task's rows with ``datasets``: from local files (``data_files=``) or from the Hub."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentfly_envs.errors import DataUnavailableError, TaskFormatError
from agentfly_envs.tasks.base import Row, TaskSource

DataFiles = str | os.PathLike | Sequence[str | os.PathLike] | Mapping[str, str | os.PathLike | Sequence[str]]
"""A JSON (list of rows), JSONL or parquet file, a list of them, or ``{split: files}``."""

FILE_FORMATS = {".json": "json", ".jsonl": "json", ".parquet": "parquet"}
MAX_PYTHON_ROWS_BYTES = 64 * 2**20
"""Largest loaded data (Arrow bytes) whose rows :class:`LoadedTasks` turns into Python dicts once, on first use,
instead of asking ``datasets`` for each row (which costs more than an env step)."""


def _file_format(data_files: DataFiles) -> str:
    first = next(iter(data_files.values())) if isinstance(data_files, Mapping) else data_files
    if not isinstance(first, str | os.PathLike):
        first = next(iter(first))
    suffix = os.path.splitext(os.fspath(first))[1].lower()
    if suffix not in FILE_FORMATS:
        raise DataUnavailableError(
            f"cannot tell the format of {os.fspath(first)!r}: use a .json (a list of rows), .jsonl or .parquet file"
        )
    return FILE_FORMATS[suffix]


def check_json_file(path: str | os.PathLike) -> int:
    """Parses a JSON-list or JSONL file strictly, as ``datasets`` does not (it may skip or mend a bad line).

    Returns:
        The number of rows: the list's items, or the non-empty lines.

    Raises:
        DataUnavailableError: the file is not UTF-8 or not valid JSON; one line naming the file, the line number
            (1-based) and the JSON error.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise DataUnavailableError(
            f"{os.fspath(path)}: not UTF-8 text ({error.reason} at byte {error.start})"
        ) from None
    one_list = text.lstrip().startswith("[")
    if one_list:  # one JSON list of rows
        chunks = [(0, text)]
    else:  # JSONL: one row per line
        chunks = [(number, line) for number, line in enumerate(text.splitlines()) if line.strip()]
    for offset, chunk in chunks:
        try:
            parsed = json.loads(chunk)
        except json.JSONDecodeError as error:
            raise DataUnavailableError(
                f"{os.fspath(path)} line {offset + error.lineno}: invalid JSON: {error.msg} (column {error.colno}); "
                "fix that line (a .json file holds one list of rows, a .jsonl file one JSON object per line)"
            ) from None
    return len(parsed) if one_list else len(chunks)


def _row_count(path: str) -> int:
    """The number of rows of a JSON-list, JSONL or parquet file."""
    if _file_format(path) == "parquet":
        import pyarrow.parquet  # a dependency of datasets

        return pyarrow.parquet.read_metadata(path).num_rows
    return check_json_file(path)


def _files(data_files: DataFiles) -> list[str | os.PathLike]:
    groups = data_files.values() if isinstance(data_files, Mapping) else [data_files]
    return [f for group in groups for f in ([group] if isinstance(group, str | os.PathLike) else group)]


def load_rows(
    path: str,
    name: str | None,
    split: str,
    data_files: DataFiles | None,
    required_fields: Sequence[str],
    offline_hint: str,
) -> Any:
    """Loads a split with ``datasets``: from local files when ``data_files`` is given, else from the Hub.

    Args:
        path: Hub dataset id (used only without ``data_files``).
        name: Hub dataset config name.
        split: Split to load; with a single file or list of files the split is ``"train"``.
        data_files: JSON (list of rows), JSONL or parquet file(s), or a ``{split: files}`` mapping.
        required_fields: Columns the rows must have.
        offline_hint: How to provide the data without the Hub, appended to the error when loading fails.

    Returns:
        A ``datasets.Dataset`` (indexable, ``len``-able, rows as dicts).

    Raises:
        DataUnavailableError: the data cannot be loaded, or has no rows; the message says how to provide it.
        TaskFormatError: the data lacks a required column.
    """
    import datasets  # lazy: datasets takes ~1 s to import

    quiet = not datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()  # "Generating train split" bars for a few local rows are noise
    try:
        if data_files is None:
            dataset = datasets.load_dataset(path, name, split=split)
        else:
            if not isinstance(data_files, Mapping):
                split = "train"
            if _file_format(data_files) == "json":
                for path in _files(data_files):
                    check_json_file(path)
            dataset = datasets.load_dataset(_file_format(data_files), data_files=data_files, split=split)
    except DataUnavailableError:
        raise
    except Exception as e:
        source = f"files {data_files!r}" if data_files is not None else f"{path!r} (config {name!r}) from the Hub"
        raise DataUnavailableError(
            f"could not load split {split!r} of {source}: {type(e).__name__}: {' '.join(str(e).split())}. "
            f"{offline_hint}"
        ) from e
    finally:
        if not quiet:
            datasets.enable_progress_bars()
    missing = [f for f in required_fields if f not in dataset.column_names]
    if missing:
        raise TaskFormatError(
            f"the data ({data_files or path}) lacks column(s) {missing} (it has {dataset.column_names}); "
            f"the task needs {list(required_fields)}"
        )
    if len(dataset) == 0:
        raise DataUnavailableError(f"the data ({data_files or path}) has no rows in split {split!r}")
    return dataset


def _python_rows(dataset: Any) -> list[Row] | None:
    """Every row of ``dataset`` as a dict without its ``None`` fields, when every column holds scalars (strings,
    numbers, booleans: a row's copy can then share its values) and the data is at most
    :data:`MAX_PYTHON_ROWS_BYTES`; else ``None``."""
    import datasets  # loaded already: the rows came from it

    scalar = all(isinstance(feature, datasets.Value) for feature in dataset.features.values())
    if not scalar or dataset.data.nbytes > MAX_PYTHON_ROWS_BYTES:
        return None
    columns = dataset[:]
    names = list(columns)
    return [
        {name: value for name, value in zip(names, values, strict=True) if value is not None}
        for values in zip(*columns.values(), strict=True)
    ]


class LoadedTasks(TaskSource):
    """A task source whose rows were loaded once (:meth:`load`) into ``self._rows``; data of scalar columns is
    turned into Python rows on the first :meth:`row` (see :data:`MAX_PYTHON_ROWS_BYTES`)."""

    _rows: Any
    _python: list[Row] | None = None
    _python_checked = False
    _origin: str | list[str] = ""
    """Where the rows come from: the local files of the loaded split in order, or the Hub dataset and split."""

    def load(
        self,
        path: str,
        name: str | None,
        split: str,
        data_files: DataFiles | None,
        required_fields: Sequence[str],
        offline_hint: str,
    ) -> None:
        """Loads the rows with :func:`load_rows` (the same arguments) and notes where they come from (:meth:`where`)."""
        self._rows = load_rows(path, name, split, data_files, required_fields, offline_hint)
        if data_files is None:
            self._origin = f"{path} split {split!r}"
        else:
            self._origin = [
                os.fspath(f) for f in _files(data_files[split] if isinstance(data_files, Mapping) else data_files)
            ]

    def __len__(self) -> int:
        return len(self._rows)

    def row(self, index: int) -> Row:
        """Row ``index``, without the fields it leaves out (which ``datasets`` fills with ``None`` where other rows
        have them)."""
        if not self._python_checked:
            self._python, self._python_checked = _python_rows(self._rows), True
        if self._python is not None:
            return dict(self._python[index])
        return {key: value for key, value in self._rows[index].items() if value is not None}

    def where(self, index: int) -> str:
        """``"FILE row N (1-based)"``, N counted within the file; for a Hub dataset ``"row N (1-based) of ID split
        'SPLIT'"``."""
        if not self._origin:  # rows a subclass loaded itself
            return super().where(index)
        if isinstance(self._origin, str):
            return f"{super().where(index)} of {self._origin}"
        try:
            counts = [_row_count(path) for path in self._origin]
        except (DataUnavailableError, OSError, ValueError):  # a file only datasets reads (e.g. a URL): name them all
            counts = []
        if sum(counts) == len(self):
            start = 0
            for path, count in zip(self._origin, counts, strict=True):
                if index < start + count:
                    return f"{path} {super().where(index - start)}"
                start += count
        return f"{super().where(index)} of {', '.join(self._origin)}"
