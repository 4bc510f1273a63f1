"""observe: log aggregation and failure analysis for GPU training clusters run by Slurm."""
import os

# observe does no linear algebra; numpy's OpenBLAS threads would otherwise start (and spin) with it
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
