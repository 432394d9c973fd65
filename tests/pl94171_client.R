# Read a directory of PL 94-171 files with the PL94171 R package, as a redistricting analyst would,
# and write what it read for tests/test_pl94171.py to compare:
#   Rscript tests/pl94171_client.R PL_DIR OUT_DIR     (env RLIB: the R library holding PL94171)
# Any warning (a field that does not parse, a type problem) is an error: options(warn = 2).
options(warn = 2)
args <- commandArgs(trailingOnly = TRUE)
suppressPackageStartupMessages(library(PL94171, lib.loc = Sys.getenv("RLIB")))
pl <- pl_read(args[1])
dir.create(args[2], showWarnings = FALSE)
shapes <- data.frame()
for (name in names(pl)) {
    tab <- pl[[name]]
    n_problems <- nrow(readr::problems(tab))
    shapes <- rbind(shapes, data.frame(file = name, records = nrow(tab), fields = ncol(tab),
                                       unnamed = sum(startsWith(names(tab), "...")),
                                       problems = n_problems))
    readr::write_csv(tab, file.path(args[2], paste0(name, ".csv")), na = "")
}
readr::write_csv(shapes, file.path(args[2], "shapes.csv"))
std <- pl_select_standard(pl)
readr::write_csv(std, file.path(args[2], "standard.csv"), na = "")
blocks <- pl_subset(pl, "750")
readr::write_csv(data.frame(GEOID = blocks$GEOID, P0010001 = blocks$P0010001),
                 file.path(args[2], "subset_750.csv"))
