"""mgst: a testbed for desktop-grid scheduling policies, in simulation and on real machines."""
