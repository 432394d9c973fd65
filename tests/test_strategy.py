"""Strategies as specs: strict exact fractions, validation against schema and hierarchy, shipped specs."""

from fractions import Fraction

import pytest

from das.core.errors import BudgetError, SpecError
from das.model.schema import load_schema
from das.privacy.accounting import allocate
from das.privacy.strategy import load_strategy, parse_fraction, validate_strategy

FIVE = ("nation", "state", "county", "tract", "block")
SIX = ("nation", "state", "county", "tract", "block_group", "block")
SHIPPED = [("pl94_production_2020", "pl94_persons", SIX), ("pl94_five_level", "pl94_persons", FIVE),
           ("pl94_six_level", "pl94_persons", SIX),
           ("h1_units", "h1_units", SIX), ("h1_units_five_level", "h1_units", FIVE),
           ("dhc_persons_small", "dhc_persons", FIVE)]
PL94_QUERIES = ["total", "cenrace", "hispanic", "votingage", "hhinstlevels", "hhgq", "hispanic x cenrace",
                "votingage x cenrace", "votingage x hispanic", "votingage x hispanic x cenrace", "detailed"]

# DESIGN.md section 4, the 2020 US persons production table, column by column (None: not measured).
PRODUCTION_LEVEL_SHARES = {"nation": "104/4099", "state": "1440/4099", "county": "447/4099", "tract": "687/4099",
                           "block_group": "1256/4099", "block": "165/4099"}
PRODUCTION_TABLE = {
    "nation": [None, "52/4097", "26/4097", "26/4097", "26/4097", "26/4097", "130/4097", "130/4097", "26/4097",
               "26/241", "189/241"],
    "state": ["3773/4097", "6/4097", "6/4097", "6/4097", "6/4097", "6/4097", "12/4097", "12/4097", "6/4097",
              "2/241", "230/4097"],
    "county": ["3126/4097", "10/4097", "10/4097", "10/4097", "10/4097", "10/4097", "28/4097", "28/4097", "10/4097",
               "101/4097", "754/4097"],
    "tract": ["1567/4102", "4/2051", "5/4102", "5/4102", "5/4102", "5/4102", "1933/4102", "10/2051", "5/4102",
              "67/4102", "241/2051"],
    "block_group": ["1705/4099", "3/4099", "3/4099", "3/4099", "3/4099", "3/4099", "1055/4099", "9/4099", "3/4099",
                    "24/4099", "1288/4099"],
    "block": ["5/4097", "9/4097", "5/4097", "5/4097", "5/4097", "5/4097", "21/4097", "21/4097", "5/4097",
              "71/4097", "3945/4097"],
}


@pytest.mark.parametrize("name,schema,levels", SHIPPED)
def test_shipped_strategies_load_validate_and_allocate_exactly(name, schema, levels):
    strategy = load_strategy(name)
    assert strategy.schema == schema and strategy.level_names == levels
    validate_strategy(strategy, load_schema(schema), levels)
    allocation = allocate(strategy, strategy.rho)
    assert allocation.total() == strategy.rho  # Fraction equality: nothing lost or invented
    assert sum(Fraction(1) / c.sigma2 for c in allocation.items) == strategy.rho
    assert strategy.delta == Fraction(1, 10**10)


def test_published_production_table_sums_to_exactly_one():
    """Every column of the published table, and the level shares, sum to exactly 1."""
    assert sum(Fraction(s) for s in PRODUCTION_LEVEL_SHARES.values()) == 1
    for level, column in PRODUCTION_TABLE.items():
        assert sum(Fraction(s) for s in column if s) == 1, level


def test_production_spec_is_the_published_table():
    strategy = load_strategy("pl94_production_2020")
    for lv in strategy.levels:
        assert lv.rho_share == Fraction(PRODUCTION_LEVEL_SHARES[lv.level])
        expected = [(q, Fraction(s)) for q, s in zip(PL94_QUERIES, PRODUCTION_TABLE[lv.level]) if s]
        assert list(lv.queries) == expected, lv.level
    assert "total" not in strategy.level("nation").query_names
    assert strategy.rho == Fraction(293764, 114921)


def test_five_level_strategy_is_the_documented_blend_of_production():
    five, prod = load_strategy("pl94_five_level"), load_strategy("pl94_production_2020")
    for level in ("nation", "state", "county"):
        assert five.level(level) == prod.level(level)
    bg = prod.level("block_group")
    half_bg = bg.rho_share / 2
    for level in ("tract", "block"):
        own = prod.level(level)
        assert five.level(level).rho_share == own.rho_share + half_bg
        for q, share in five.level(level).queries:
            blend = (own.rho_share * own.share(q) + half_bg * bg.share(q)) / (own.rho_share + half_bg)
            assert abs(share - blend) < Fraction(15, 10000), (level, q)
            assert share.denominator in (1, 2, 4, 5, 8, 10, 20, 25, 40, 50, 100, 125, 200, 250, 500, 1000)


def test_h1_production_shares_and_five_level_split():
    h1, five = load_strategy("h1_units"), load_strategy("h1_units_five_level")
    assert [lv.rho_share for lv in h1.levels] == [Fraction(s) for s in
                                                  ("1/205", "1/205", "7/82", "364/1025", "1759/4100", "99/820")]
    assert h1.rho == five.rho == Fraction(11417641, 152349649)
    assert all(lv.query_names == ("detailed",) for lv in h1.levels + five.levels)
    half_bg = h1.level("block_group").rho_share / 2
    assert five.level("tract").rho_share == h1.level("tract").rho_share + half_bg
    assert five.level("block").rho_share == h1.level("block").rho_share + half_bg


# ---------------------------------------------------------------------------------------------
# parse_fraction


@pytest.mark.parametrize("text,value", [("293764/114921", Fraction(293764, 114921)), ("1e-10", Fraction(1, 10**10)),
                                        ("0.398", Fraction(398, 1000)), (" 3/4 ", Fraction(3, 4)), (7, Fraction(7)),
                                        ("2", Fraction(2)), ("2.5E-3", Fraction(1, 400))])
def test_parse_fraction_accepts_exact_forms(text, value):
    assert parse_fraction(text, "f.toml: k") == value


@pytest.mark.parametrize("value,message", [
    ("1/0", "zero denominator"), ("abc", "not an exact fraction"), ("1/2/3", "not an exact fraction"),
    ("1 / 2", "not an exact fraction"), ("nan", "not an exact fraction"), ("inf", "not an exact fraction"),
    ("1_000", "not an exact fraction"), ("", "not an exact fraction"), (True, "not an exact fraction"),
    (0.5, "floats are not exact"), ("0", "must be positive"), ("-1/3", "must be positive"), (0, "must be positive"),
    ([1], "not an exact fraction"),
])
def test_parse_fraction_refuses_with_file_and_key(value, message):
    with pytest.raises(SpecError, match=message) as e:
        parse_fraction(value, "s.toml: levels.block.rho_share")
    assert str(e.value).startswith("s.toml: levels.block.rho_share: ")


# ---------------------------------------------------------------------------------------------
# refusals


def spec_file(tmp_path, levels: dict, schema="pl94_persons", extra=""):
    lines = ['name = "t"', f'schema = "{schema}"', 'rho = "1"', extra]
    for level, (share, queries) in levels.items():
        lines += [f"[levels.{level}]", f'rho_share = "{share}"', f"[levels.{level}.queries]"]
        lines += [f'"{q}" = "{s}"' for q, s in queries.items()]
    path = tmp_path / "s.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def good_levels(**override):
    levels = {"nation": ("1/2", {"total": "1/2", "detailed": "1/2"}), "state": ("1/2", {"total": "1"})}
    levels.update(override)
    return levels


def check(tmp_path, levels, run_levels=("nation", "state"), **kw):
    validate_strategy(load_strategy(spec_file(tmp_path, levels, **kw)), load_schema("pl94_persons"), run_levels)


def test_a_good_spec_validates(tmp_path):
    check(tmp_path, good_levels())


def test_shares_one_4097th_short_are_refused(tmp_path):
    short = str(Fraction(1, 2) - Fraction(1, 4097))
    with pytest.raises(BudgetError, match=r"query shares of level nation sum to 4096/4097, not exactly 1 \(off by -1/4097\)"):
        check(tmp_path, good_levels(nation=("1/2", {"total": "1/2", "detailed": short})))
    with pytest.raises(BudgetError, match="level rho_shares sum to 5/6, not exactly 1"):
        check(tmp_path, good_levels(state=("1/3", {"total": "1"})))
    with pytest.raises(BudgetError, match="level rho_shares sum to 3/2"):
        check(tmp_path, good_levels(state=("1", {"total": "1"})))


def test_zero_and_negative_shares_are_refused(tmp_path):
    with pytest.raises(SpecError, match=r"\[levels.state.queries\] total must be positive"):
        load_strategy(spec_file(tmp_path, good_levels(state=("1/2", {"total": "0"}))))
    with pytest.raises(SpecError, match=r"\[levels.state\] rho_share must be positive"):
        load_strategy(spec_file(tmp_path, good_levels(state=("-1/2", {"total": "1"}))))


def test_unknown_queries_and_bad_query_names_are_refused(tmp_path):
    with pytest.raises(SpecError, match="levels.state: .*'sex' is neither an attribute nor a recode"):
        check(tmp_path, good_levels(state=("1/2", {"votingage x sex": "1"})))
    with pytest.raises(SpecError, match="write query 'votingage  x hispanic' as 'votingage x hispanic'"):
        check(tmp_path, good_levels(state=("1/2", {"votingage  x hispanic": "1"})))
    with pytest.raises(SpecError, match="same marginal twice"):
        check(tmp_path, good_levels(state=("1/2", {"votingage x hispanic": "1/2", "hispanic x votingage": "1/2"})))
    with pytest.raises(SpecError, match="same marginal twice"):
        check(tmp_path, good_levels(state=("1/2", {"detailed": "1/2", "hhgq x votingage x hispanic x cenrace": "1/2"})))


def test_levels_must_be_the_runs_levels_in_order(tmp_path):
    with pytest.raises(SpecError, match="not the run's levels"):
        check(tmp_path, good_levels(), run_levels=("nation", "county"))
    with pytest.raises(SpecError, match="not the run's levels"):
        check(tmp_path, good_levels(), run_levels=("state", "nation"))
    with pytest.raises(SpecError, match="not the run's levels"):
        check(tmp_path, good_levels(), run_levels=("nation", "state", "block"))


def test_schema_mismatch_and_malformed_specs_are_refused(tmp_path):
    with pytest.raises(SpecError, match="is for schema 'h1_units'"):
        check(tmp_path, good_levels(), schema="h1_units")
    with pytest.raises(SpecError, match=r"unknown key\(s\) \['rho_shares'\]"):
        load_strategy(spec_file(tmp_path, good_levels(), extra='rho_shares = "1"'))
    with pytest.raises(SpecError, match="floats are not exact"):
        load_strategy(spec_file(tmp_path, good_levels(), extra="delta = 1e-10"))
    with pytest.raises(SpecError, match="1/0.*zero denominator"):
        load_strategy(spec_file(tmp_path, good_levels(nation=("1/0", {"total": "1"}))))
    with pytest.raises(SpecError, match="'abc' is not an exact fraction"):
        load_strategy(spec_file(tmp_path, good_levels(nation=("abc", {"total": "1"}))))
    with pytest.raises(SpecError, match="no strategie spec|not one of"):
        load_strategy("no_such_strategy")
    empty = tmp_path / "e.toml"
    empty.write_text('schema = "pl94_persons"\n[levels.nation]\nrho_share = "1"\nqueries = {}\n')
    with pytest.raises(SpecError, match=r"\[levels.nation\] queries: \{\} is not valid \(expected a non-empty table"):
        load_strategy(empty)


def test_six_level_strategy_moves_the_invariant_state_total_to_block_groups():
    """Same total rho as production; every measured budget is production's or five-level's, except that the
    state `total` (invariant, so never informative) is not measured and its budget goes to block groups."""
    six, prod, five = load_strategy("pl94_six_level"), load_strategy("pl94_production_2020"), load_strategy("pl94_five_level")
    assert six.rho == prod.rho and sum(lv.rho_share for lv in six.levels) == 1
    budget = {(i.level, i.query): i.rho for i in allocate(six, six.rho).items}
    for source, levels in ((prod, ("nation", "state", "county")), (five, ("tract", "block"))):
        for item in allocate(source, source.rho).items:
            if item.level in levels and (item.level, item.query) != ("state", "total"):
                assert budget[(item.level, item.query)] == item.rho, (item.level, item.query)
    assert ("state", "total") not in budget
    state_total = next(i.rho for i in allocate(prod, prod.rho).items if (i.level, i.query) == ("state", "total"))
    assert sum(r for (level, _), r in budget.items() if level == "block_group") == state_total
