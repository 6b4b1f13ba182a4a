"""Console-script entry points of the compute agent."""
