"""A lab network on one machine: network namespaces joined to the mapper by TUN links, and a userspace relay that
delays, jitters, drops and paces their packets (this kernel has no netem qdisc; docs/network.md)."""
