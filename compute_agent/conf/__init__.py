"""Configuration options of the compute agent, one module per option group."""
