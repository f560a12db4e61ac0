"""Built-in passes, one per module; importing this package registers them all."""

from graphir.passes import critical_path, dce, strip_annotations

__all__ = ["critical_path", "dce", "strip_annotations"]
