"""Dev tools, apart from the pipeline: simulators, local stack, demo, eval, calibration."""
