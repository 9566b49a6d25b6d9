"""satbed: a network-emulation testbed for satellite links (control plane)."""

__version__ = "0.1.0"
