"""A hosts file read whole: SSH hosts (mgst.lab.hosts) or a Slurm section (mgst.lab.slurm_config), never both."""

from __future__ import annotations

from pathlib import Path

from mgst.lab.hosts import HostsFileError, Lab, parse_hosts
from mgst.lab.slurm_config import SlurmLab, parse_slurm
from mgst.toml_file import TomlFileError, read_toml


def load_lab(path: Path) -> Lab | SlurmLab:
    """The lab of the hosts file at ``path``; HostsFileError naming the key."""
    try:
        data = read_toml(path)
    except TomlFileError as e:
        raise HostsFileError("(file)", str(e), str(path)) from None
    if "slurm" in data:
        both = [k for k in ("hosts", "defaults") if k in data]
        if both:
            raise HostsFileError(both[0], "a hosts file has either SSH hosts ([hosts.NAME], [defaults]) or a "
                                          "[slurm] section, not both: put each in a file of its own", str(path))
        return parse_slurm(data, path)
    return parse_hosts(data, path)
