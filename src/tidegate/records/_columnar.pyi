from typing import Any

def decode_columns(
    batches: list[tuple[bytes, int, int, int, int | None, int]],
    min_offset: int,
    want_headers: bool,
) -> tuple[Any, ...]: ...
