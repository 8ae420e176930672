//! `[[filters]]`: events not to deliver, by a CEL expression (`core::expr`).

use super::{invalid, ConfigError};
use crate::core::expr::{Expr, Filter, Filters};
use serde::{Deserialize, Serialize};

/// One `[[filters]]` entry: an event its `drop` expression says `true` of is
/// not delivered. It is counted in `courier_filtered_total{filter}` and its
/// offset committed as a delivered one's. Filters are evaluated in order;
/// the first that drops an event ends it. An expression that fails for an
/// event (a missing field, a division by zero, over its bound) parks the
/// event `expression_failed`: neither dropped nor delivered.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilterConfig {
    /// The filter's name in `courier_filtered_total{filter}` and the logs:
    /// A-Z, a-z, 0-9, `.`, `_`, `-`, at most 64 bytes, unique.
    pub name: String,
    /// A CEL expression that yields a bool: `true` drops the event
    /// (docs/guide: "Filters and routes by expression"). Checked at start
    /// (`courier check-config` names the line and column of an error).
    pub drop: String,
    /// Only count (`courier_filter_would_drop_total{filter}`) and log a
    /// sample of what it would drop; drop nothing, and park nothing (an event
    /// it fails for is delivered, and logged). A filter's commits cannot be
    /// undone: try a new one this way first.
    #[serde(default)]
    pub dry_run: bool,
}

/// The filters, compiled: each expression checked, names well-formed and
/// unique. Errors name the filter and the position.
pub(crate) fn compile(filters: &[FilterConfig]) -> Result<Filters, ConfigError> {
    let mut out: Vec<Filter> = Vec::with_capacity(filters.len());
    for (i, f) in filters.iter().enumerate() {
        let field = |k: &str| format!("filters[{i}].{k}");
        crate::core::destination::check_name(&f.name)
            .map_err(|e| invalid(&field("name"), e.to_string()))?;
        if let Some(j) = out.iter().position(|o| o.name == f.name) {
            return Err(invalid(
                &field("name"),
                format!(
                    "\"{}\" is the name of filters[{j}] too: filter names must be unique",
                    f.name
                ),
            ));
        }
        let drop = Expr::compile(&f.drop).map_err(|e| {
            invalid(
                &format!("filters[{i}].drop (filter \"{}\")", f.name),
                e.to_string(),
            )
        })?;
        out.push(Filter {
            name: f.name.clone(),
            drop,
            dry_run: f.dry_run,
        });
    }
    Ok(Filters::new(out))
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    fn refused(toml: &str) -> String {
        Config::from_toml(toml)
            .and_then(|c| c.validate().map(|()| c))
            .map(|_| String::new())
            .unwrap_or_else(|e| e.to_string())
    }

    #[test]
    fn a_broken_filter_is_named_with_its_position() {
        let e = refused(
            "[[filters]]\nname = \"tests\"\ndrop = 'event.type.startsWith(\"test.\") &&'\n",
        );
        assert!(
            e.contains("filters[0].drop (filter \"tests\")") && e.contains("line 1, column"),
            "{e}"
        );
        let e = refused("[[filters]]\nname = \"a\"\ndrop = 'true'\n\n[[filters]]\nname = \"a\"\ndrop = 'false'\n");
        assert!(e.contains("filters[1].name") && e.contains("unique"), "{e}");
        let e = refused("[[filters]]\nname = \"a b\"\ndrop = 'true'\n");
        assert!(e.contains("filters[0].name"), "{e}");
        let e = refused("[[api.routes]]\nname = \"r\"\ntype = \"*\"\nurl = \"http://127.0.0.1:9/r\"\nwhen = '''headers.x == 1 &&\n  )'''\n");
        assert!(
            e.contains("api.routes[0].when (route \"r\")") && e.contains("line 2"),
            "{e}"
        );
        assert_eq!(
            refused(
                "[[filters]]\nname = \"ok\"\ndrop = 'event.data.amount < 100'\ndry_run = true\n"
            ),
            ""
        );
    }
}
