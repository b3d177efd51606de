"""What a user describes: GPUs, architectures, workloads, the field table, configuration
columns, the catalogue of published models, Hugging Face configs and search spaces. Pure data and
validation, at the bottom of the import graph above the base modules (issue 23)."""
