"""The geography's levels by name: the one table of them (name -> geocode prefix length), light enough for the
command line to import. Code names a level by its constant here (NATION ... BLOCK), never by spelling it, so a
new level is one entry in this table (docs/architecture.md); das.model.geography builds the hierarchy on it."""

# The levels das knows, by name: the only place their names are spelled.
NATION, STATE, COUNTY, TRACT, BLOCK_GROUP, BLOCK = "nation", "state", "county", "tract", "block_group", "block"
# Name -> geocode prefix length. The nation's geocode is the empty string.
LEVEL_DIGITS = {NATION: 0, STATE: 2, COUNTY: 5, TRACT: 11, BLOCK_GROUP: 12, BLOCK: 15}
DEFAULT_LEVELS = (NATION, STATE, COUNTY, TRACT, BLOCK_GROUP, BLOCK)  # the 2020 production spine
