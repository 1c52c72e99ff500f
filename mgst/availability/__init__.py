"""Machine availability models: when machines go down and come back."""
