"""A kio entity reader that skips unknown tagged fields, as Kafka's rule says.

Kafka's flexible versions (KIP-482) let a sender add tagged fields a receiver
does not know; the receiver must skip them. kio's native reader raises
``KeyError('Unknown tagged field tag: N')`` instead, so a newer client could
break a request just by adding a field. ``frames.decode_request`` reads with
kio's fast native reader first and falls back to this one only when that
fails: this reader walks the same dataclass schemas (field metadata
``kafka_type`` and ``tag``), reads primitive fields with kio's native field
readers, recurses into nested entities itself and, in every tagged-field
section, reads the tags it knows and steps over the others by their length.

Malformed input (truncated data, a negative compact length, a varint longer
than 5 bytes, a tagged field whose length disagrees with its content) raises
``wire.CodecError`` (``SchemaReadError`` for the schema's own checks): varints and
tagged-field sections are read by ``replog.protocol.wire``, as the hand codecs read them.

Concurrency: pure functions over bytes; safe anywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import Field, fields
from functools import cache
from typing import Any

from kio._kio_native import get_field_reader
from kio.serial._implicit_defaults import get_tagged_field_default
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)
from kio.serial.readers import read_int8, read_legacy_array_length

from replog.protocol.wire import CodecError, check_field_end, read_tagged_fields, read_uvarint

Reader = Callable[[Any, int], tuple[Any, int]]


class SchemaReadError(CodecError):
    """Bytes that do not decode as the schema says."""


def _array(item: Reader, flexible: bool, nullable: bool) -> Reader:
    def read(buffer: Any, offset: int) -> tuple[Any, int]:
        start = offset
        if flexible:
            raw, end = read_uvarint(buffer, offset)
            size = end - offset
            length = None if raw == 0 else raw - 1
        else:
            raw, size = read_legacy_array_length(buffer, offset)
            length = None if raw == -1 else int(raw)
            if length is not None and length < -1:
                raise SchemaReadError(f"negative array length {raw} at byte {offset}")
        offset += size
        if length is None:
            if not nullable:
                raise SchemaReadError(f"null array where the schema forbids it at byte {start}")
            return None, offset - start
        # Every item takes at least one byte: a length beyond what is left is a lie.
        if length > len(buffer) - offset:
            raise SchemaReadError(f"array of {length} items at byte {start} overruns the frame")
        items = []
        for _ in range(length):
            value, used = item(buffer, offset)
            items.append(value)
            offset += used
        return tuple(items), offset - start

    return read


def _nullable_entity(read: Reader) -> Reader:
    def read_nullable(buffer: Any, offset: int) -> tuple[Any, int]:
        marker, size = read_int8(buffer, offset)
        if marker == -1:
            return None, size
        value, used = read(buffer, offset + size)
        return value, size + used

    return read_nullable


def _field_reader(entity_type: type, field: Field[Any], is_tag: bool) -> Reader:
    flexible = entity_type.__flexible__
    field_class = classify_field(field)
    optional = False if is_tag else is_optional(field)
    if isinstance(field_class, EntityTupleField):
        return _array(entity_reader(field_class.type_), flexible, optional)
    if isinstance(field_class, EntityField):
        read = entity_reader(field_class.type_)
        return _nullable_entity(read) if optional else read
    is_header = entity_type.__name__ == "RequestHeader"
    return get_field_reader(entity_type, field, is_header, is_tag)


@cache
def entity_reader(entity_type: type) -> Reader:
    """A reader of ``entity_type`` returning ``(entity, bytes used)``."""
    plain: list[tuple[str, Reader]] = []
    tagged: dict[int, tuple[Field[Any], Reader]] = {}
    for field in fields(entity_type):
        tag = get_field_tag(field)
        if tag is None:
            plain.append((field.name, _field_reader(entity_type, field, False)))
        else:
            tagged[int(tag)] = (field, _field_reader(entity_type, field, True))
    flexible = entity_type.__flexible__
    defaults = {field.name: get_tagged_field_default(field) for field, _ in tagged.values()}

    def read(buffer: Any, offset: int) -> tuple[Any, int]:
        start = offset
        values: dict[str, Any] = {}
        try:
            for name, reader in plain:
                values[name], used = reader(buffer, offset)
                offset += used
        except CodecError:
            raise
        except Exception as exc:  # kio's native readers raise several types
            raise SchemaReadError(
                f"{entity_type.__name__}.{name} at byte {offset}: {exc}"
            ) from None
        if flexible:
            values.update(defaults)
            # Tags this schema does not know are stepped over (wire's section reader checks
            # every field lies inside the frame).
            fields_read, end = read_tagged_fields(buffer, offset)
            for tag, field_start, field_end in fields_read:
                known = tagged.get(tag)
                if known is None:
                    continue
                field, reader = known
                try:
                    values[field.name], used = reader(buffer[:field_end], field_start)
                except CodecError:
                    raise
                except Exception as exc:
                    raise SchemaReadError(
                        f"tagged field {tag} of {entity_type.__name__}: {exc}"
                    ) from None
                check_field_end(tag, field_start + used, field_end)
            offset = end
        return entity_type(**values), offset - start

    return read


def read_entity(entity_type: type, buffer: bytes | memoryview, offset: int = 0) -> tuple[Any, int]:
    """Decode one ``entity_type`` at ``offset``; ``(entity, bytes used)``."""
    return entity_reader(entity_type)(buffer, offset)
