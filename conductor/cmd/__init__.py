"""Console-script entry points: thin ``main()`` functions, nothing else."""
