"""Job generators: where the jobs of an experiment come from."""
