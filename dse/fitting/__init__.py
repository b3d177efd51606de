"""`dse fit` and `dse validate`: the model families in fitting order (`families.FAMILIES`), the
fit driver (`run.fit_artifact`), cross-validation (`cv`), one file per Level-1 family, Levels
2-3 (`level2`, `level3`, their training rows in `e2e_rows`) and the validation of an artifact
against measured rows (`validate`)."""
