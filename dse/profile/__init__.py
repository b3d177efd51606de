"""`dse profile`: measure a GPU's primitives (GEMM, attention, MoE, layer ops, all-reduce) with
PyTorch and write them in the layout `dse fit` reads, so a new chip gets its own artifact.

Modules: `grid` (which shapes), `timing` (how a shape is timed), `energy` (how its energy is
read), `ops` (the PyTorch kernels), `spec` (the GPU spec file and manifest), `writer` (journal
and tables), `run` (the loop). PyTorch is imported lazily: `pip install dse[profile]`.
"""
