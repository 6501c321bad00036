"""One cleaning round of one partition, as separable stages.

Options and statistics, the frozen plan, pass 1 (``mapping``: the offset map), the chunks of a
segment, pass 2 (``filtering``: ``Cleaner.cleanInto``), the output self-check and the stages that
join them (``stages``).
"""
