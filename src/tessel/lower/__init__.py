"""The lower stage: integer Graph IR -> exact rewrites for the instruction fields (legalise) ->
NPU regions and host parts (partition), every host op with its reason."""
