"""A DP median per geounit (for example of age by tract), with the exact exponential mechanism.

Per geounit, the candidates are the attribute's levels (ages 0..115 on the DHC schema: public); the
utility of level m is min(#{x <= m}, #{x >= m}) (Delta = 1, `median_utilities`). One selection per
geounit, eps each: parallel composition over geounits, charged 2 x eps^2/8 since a changed record may
move between two geounits.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import scipy.sparse as sp

from das.geography import Geography
from das.mechanisms.base import Ledger
from das.privacy.exponential import dp_median
from das.privacy.randomness import RandomSource
from das.schema import Schema


def median_by_geounit(histograms: sp.csr_matrix, schema: Schema, geography: Geography, attribute: str, level: str,
                      eps: Fraction, rng: RandomSource, ledger: Ledger) -> dict[str, object]:
    """geocode -> the input code of an eps-DP median of `attribute` in that geounit (every geounit of `level`)."""
    ledger.exponential(level, f"median of {attribute}", eps, Fraction(1), per_geounit=True)
    levels = schema.levels_of(attribute, np.arange(schema.size))
    size = schema.factor_size(attribute)
    to_attribute = sp.csr_matrix((np.ones(schema.size, dtype=np.int64), (np.arange(schema.size), levels)),
                                 shape=(schema.size, size))
    per_unit = geography.aggregate((histograms @ to_attribute).toarray(), level)
    codes = schema.attribute(attribute).codes if attribute in schema.names else tuple(range(size))
    return {str(g): codes[dp_median(counts, eps, rng.spawn(str(g)))]
            for g, counts in zip(geography.units(level), np.asarray(per_unit))}
