"""RabbitMQ's information units: byte counts written with a unit, as rabbitmq.conf and the
TOML configuration take them ("512MB", "1GiB", "800M"). Pure; no I/O. Read by
broker/config.py (the size keys) and broker/rabbitmq_conf.py."""

from __future__ import annotations

# RabbitMQ's information units (rabbitmq.com/memory.html#absolute-limits): k/kiB/K/KiB,
# M/MiB, G/GiB are powers of 1024; kB/KB, MB, GB are powers of 1000; case as written there
_UNITS = {
    "": 1, "b": 1, "B": 1,
    "k": 1024, "K": 1024, "kiB": 1024, "KiB": 1024, "ki": 1024, "Ki": 1024,
    "M": 1024**2, "MiB": 1024**2, "Mi": 1024**2, "m": 1024**2,
    "G": 1024**3, "GiB": 1024**3, "Gi": 1024**3, "g": 1024**3,
    "T": 1024**4, "TiB": 1024**4,
    "kB": 1000, "KB": 1000, "MB": 1000**2, "GB": 1000**3, "TB": 1000**4,
    # also in rabbit_resource_monitor_misc:parse_information_unit (3.10.8)
    "kb": 1000, "Kb": 1000, "mb": 1000**2, "Mb": 1000**2, "mB": 1000**2, "gb": 1000**3,
    "Gb": 1000**3, "gB": 1000**3, "kib": 1024, "KIB": 1024, "mib": 1024**2, "MIB": 1024**2,
    "gib": 1024**3, "GIB": 1024**3,
}


def parse_information_unit(value: int | float | str) -> int:
    """A byte count as rabbitmq.conf writes it: an integer, or a number with a unit
    ("512MB" = 512 000 000, "1GiB" = 2**30, "800M" = 800 MiB). Raises ValueError for
    anything else (negative numbers included). Source: rabbitmq.com/memory.html
    (vm_memory_high_watermark.absolute) and disk-alarms.html (disk_free_limit.absolute)."""
    if isinstance(value, bool):
        raise ValueError(f"not a size: {value!r}")
    if isinstance(value, int | float):
        number, unit = float(value), ""
    elif not isinstance(value, str):
        raise ValueError(f"not a size: {value!r}")
    else:
        text = value.strip()
        i = len(text)
        while i and not (text[i - 1].isdigit() or text[i - 1] == "."):
            i -= 1
        number_text, unit = text[:i].strip(), text[i:].strip()
        try:
            number = float(number_text)
        except ValueError:
            raise ValueError(f"not a size: {value!r}") from None
    if unit not in _UNITS or number < 0:
        raise ValueError(f"not a size: {value!r} (units: k, kiB, M, MiB, G, GiB, kB, MB, GB)")
    return int(number * _UNITS[unit])
