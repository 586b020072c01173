"""Task modules, one per task family; each task is a thin wrapper over a plain function."""
