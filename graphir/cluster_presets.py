"""Presets: the papers' testbeds as clusters (``--cluster=fastt``, ``celeritas``, ``pesto``, ``moirai-*``).

Each builder documents its source (paper section, table) next to its numbers.
"""

from __future__ import annotations

from collections.abc import Callable

from graphir.cluster_model import (
    CPU_LAUNCH_OVERHEAD,
    INFINIBAND_LATENCY,
    NVLINK,
    PCIE,
    Cluster,
    Device,
    GiB,
    Link,
    catalogue_device,
    full_mesh,
)


def _gbps(value: float) -> float:
    """Gigabits per second (Moirai Table III's unit) to bytes per second."""
    return value * 1e9 / 8


def _table_links(names: list[str], table: list[list[float | None]], latency: float) -> tuple[Link, ...]:
    """One link per ordered pair from a square bandwidth table (row = source, column = destination)."""
    return tuple(
        Link(src, dst, latency, _gbps(table[i][j]))  # type: ignore[arg-type]
        for i, src in enumerate(names)
        for j, dst in enumerate(names)
        if i != j
    )


def _preset_celeritas(spec: str) -> Cluster:
    # Celeritas §6.2.1: 4 NVIDIA Tesla V100 (32 GB each), interconnected via the PCIe bus.
    devices = tuple(catalogue_device(f"gpu{i}", f"/device:GPU:{i}", "V100-32GB") for i in range(4))
    return Cluster(spec, devices, full_mesh(devices, *PCIE))


def _preset_fastt(spec: str) -> Cluster:
    # FastT §6 testbed: 8 NVIDIA Tesla V100 (16 GB each) with NVLinks.
    devices = tuple(catalogue_device(f"gpu{i}", f"/device:GPU:{i}", "V100") for i in range(8))
    return Cluster(spec, devices, full_mesh(devices, *NVLINK))


# Intel Xeon Silver 4116 (Pesto §5): 12 cores x 2.1 GHz x 32 FP32 FLOP/cycle (one AVX-512 FMA
# unit), 6 channels of DDR4-2400 (115 GB/s).
_XEON_SILVER_4116 = (12 * 2.1e9 * 32, 115.2e9)


def _preset_pesto(spec: str) -> Cluster:
    # Pesto §5: one Xeon Silver 4116 and two V100 SXM2 16 GB; each GPU has a dedicated PCIe
    # connection to the CPU, the GPUs talk directly over NVLink.
    gpus = tuple(catalogue_device(f"gpu{i}", f"/device:GPU:{i}", "V100") for i in range(2))
    cpu = Device("cpu0", "/device:CPU:0", "cpu", 64 * GiB, *_XEON_SILVER_4116, CPU_LAUNCH_OVERHEAD)
    links = [Link("gpu0", "gpu1", *NVLINK), Link("gpu1", "gpu0", *NVLINK)]
    for gpu in gpus:
        links += [Link(gpu.name, "cpu0", *PCIE), Link("cpu0", gpu.name, *PCIE)]
    return Cluster(spec, (*gpus, cpu), tuple(links))


def _preset_moirai_inter(spec: str) -> Cluster:
    # Moirai Table III, inter-server: four single-GPU servers over InfiniBand, average bandwidth
    # in Gbps per ordered pair (row = sender A..D, column = receiver A..D).
    kinds = ["2080Ti", "T4", "P4", "3060Ti"]
    devices = tuple(catalogue_device(f"gpu{i}", f"/job:worker/task:{i}/device:GPU:0", k) for i, k in enumerate(kinds))
    table: list[list[float | None]] = [
        [None, 44.26, 32.92, 44.28],
        [42.39, None, 35.32, 44.51],
        [33.2, 35.31, None, 32.95],
        [42.08, 43.22, 33.28, None],
    ]
    return Cluster(spec, devices, _table_links([d.name for d in devices], table, INFINIBAND_LATENCY))


def _preset_moirai_intra(spec: str) -> Cluster:
    # Moirai Table III, intra-server: 2x V100 32 GB + 2x P100 16 GB, NVLink + NVSwitch; average
    # bandwidth in Gbps per ordered pair (row = sender, column = receiver).
    kinds = ["V100-32GB", "V100-32GB", "P100", "P100"]
    devices = tuple(catalogue_device(f"gpu{i}", f"/device:GPU:{i}", k) for i, k in enumerate(kinds))
    table: list[list[float | None]] = [
        [None, 1170.04, 626.10, 610.56],
        [1148.16, None, 618.98, 581.09],
        [630.43, 609.82, None, 571.96],
        [622.67, 575.08, 581.35, None],
    ]
    return Cluster(spec, devices, _table_links([d.name for d in devices], table, NVLINK[0]))


PRESETS: dict[str, tuple[str, Callable[[str], Cluster]]] = {
    "celeritas": ("Celeritas testbed: 4x V100 32 GB over PCIe", _preset_celeritas),
    "fastt": ("FastT testbed: 8x V100 16 GB over NVLink", _preset_fastt),
    "pesto": ("Pesto testbed: 2x V100 16 GB (NVLink) + Xeon Silver 4116 CPU (PCIe to each GPU)", _preset_pesto),
    "moirai-inter": (
        "Moirai Table III inter-server: 2080 Ti, T4, P4, 3060 Ti over InfiniBand (measured Gbps per pair)",
        _preset_moirai_inter,
    ),
    "moirai-intra": (
        "Moirai Table III intra-server: 2x V100 32 GB + 2x P100 16 GB, NVLink + NVSwitch (measured Gbps per pair)",
        _preset_moirai_intra,
    ),
}
"""Named presets: name -> (one-line description, builder taking the spec)."""
