//! Rust code emission from a validated [`Model`].
//!
//! The output is deterministic (same schema → same bytes) so that a test can compare it with the
//! checked-in `protocol/src/generated.rs`.

use crate::model::{
    CommandDef, Constraint, DurableDef, EnumDef, Field, Model, StructDef, Ty, UnionDef, WhenValue,
    pascal, snake,
};

struct Out {
    s: String,
}

impl Out {
    fn line(&mut self, indent: usize, text: &str) {
        if text.is_empty() {
            self.s.push('\n');
            return;
        }
        for _ in 0..indent {
            self.s.push_str("    ");
        }
        self.s.push_str(text);
        self.s.push('\n');
    }

    fn doc(&mut self, indent: usize, text: &str) {
        if text.is_empty() {
            self.line(indent, "///");
            return;
        }
        for l in text.lines() {
            if l.is_empty() {
                self.line(indent, "///");
            } else {
                self.line(indent, &format!("/// {l}"));
            }
        }
    }
}

fn lit(s: &str) -> String {
    format!("{s:?}")
}

fn rust_field(name: &str) -> String {
    let s = snake(name);
    match s.as_str() {
        "type" | "final" | "ref" | "match" | "move" | "loop" | "use" | "mod" => format!("r#{s}"),
        _ => s,
    }
}

/// UTF-8 fields with few distinct values that every record carries, decoded into a
/// `SharedStr` through the decoding thread's table of recent texts
/// (`Reader::interned_str`): no allocation per decode, and copies share one buffer.
const INTERNED: &[&str] = &["NodeFence.rid"];

fn interned(path: &str) -> bool {
    INTERNED.contains(&path)
}

fn rust_ty(m: &Model, ty: &Ty) -> String {
    match ty {
        Ty::Int { width, .. } => match width {
            1 => "u8".into(),
            2 => "u16".into(),
            4 => "u32".into(),
            _ => "u64".into(),
        },
        Ty::Bool => "bool".into(),
        Ty::Str { .. } => "String".into(),
        Ty::Bytes { .. } => "Bytes".into(),
        Ty::Fixed { size, .. } => format!("[u8; {size}]"),
        Ty::Vector { item, .. } => format!("Vec<{}>", rust_ty(m, item)),
        Ty::Struct { name, .. } | Ty::Enum { name } | Ty::Union { name } => name.clone(),
        Ty::Durable { format, .. } => m
            .durable_def(format)
            .map(|d| d.body.name.clone())
            .unwrap_or_default(),
    }
}

fn wire_desc(ty: &Ty) -> String {
    match ty {
        Ty::Int {
            width,
            min,
            max,
            nonzero,
            ..
        } => {
            let base = if *nonzero {
                "non-zero u".to_string()
            } else {
                "u".to_string()
            };
            format!("{base}{} in {min}..={max}", u32::from(*width) * 8)
        }
        Ty::Bool => "bool (one byte 0/1)".into(),
        Ty::Str {
            ascii,
            len,
            min,
            max,
        } => format!(
            "{} with {len:?} length prefix, {min}..={max} bytes",
            if *ascii { "printable ASCII" } else { "UTF-8" }
        ),
        Ty::Bytes { len, min, max } => {
            format!("bytes with {len:?} length prefix, {min}..={max} bytes")
        }
        Ty::Fixed { size, nonzero } => format!(
            "{size} bytes{}",
            if *nonzero { ", not all zero" } else { "" }
        ),
        Ty::Vector {
            count, min, max, ..
        } => format!("vector with {count:?} count, {min}..={max} items"),
        Ty::Struct { name, delimited } => match delimited {
            Some((lt, max)) => format!("`{name}` with {lt:?} length prefix, at most {max} bytes"),
            None => format!("`{name}`"),
        },
        Ty::Enum { name } | Ty::Union { name } => format!("`{name}`"),
        Ty::Durable { format, len } => {
            format!("durable format `{format}` with {len:?} length prefix")
        }
    }
}

fn serde_attr(ty: &Ty, optional: bool) -> Option<&'static str> {
    match (ty, optional) {
        (Ty::Bytes { .. }, false) => Some("#[serde(with = \"crate::codec::hex\")]"),
        (Ty::Bytes { .. }, true) => Some(
            "#[serde(default, skip_serializing_if = \"Option::is_none\", with = \"crate::codec::hex::option\")]",
        ),
        (Ty::Fixed { .. }, false) => Some("#[serde(with = \"crate::codec::hex::array\")]"),
        (Ty::Vector { item, .. }, false) if matches!(**item, Ty::Bytes { .. }) => {
            Some("#[serde(with = \"crate::codec::hex::vec_of\")]")
        }
        (_, true) => Some("#[serde(default, skip_serializing_if = \"Option::is_none\")]"),
        _ => None,
    }
}

/// Decode expression for a type (evaluates to the Rust value; uses `r`).
fn decode_expr(m: &Model, ty: &Ty, path: &str, depth: usize) -> String {
    let p = lit(path);
    match ty {
        Ty::Int {
            width,
            min,
            max,
            nonzero,
            konst,
        } => {
            let read = match width {
                1 => format!("r.u8({p})?"),
                2 => format!("r.u16({p})?"),
                4 => format!("r.u32({p})?"),
                _ => format!("r.u64({p})?"),
            };
            let full = match width {
                1 => u64::from(u8::MAX),
                2 => u64::from(u16::MAX),
                4 => u64::from(u32::MAX),
                _ => u64::MAX,
            };
            if let Some(c) = konst {
                let err = if path.ends_with(".version") {
                    format!(
                        "ProtocolError::UnsupportedVersion {{ context: {p}, found: u64::from(v) }}"
                    )
                } else {
                    format!(
                        "ProtocolError::ConstraintViolated {{ constraint: {} }}",
                        lit(&format!("{path} must be {c}"))
                    )
                };
                format!("{{ let v = {read}; if u64::from(v) != {c} {{ return Err({err}); }} v }}")
            } else if *nonzero {
                format!("{{ let v = {read}; check_nonzero({p}, u64::from(v), {max})?; v }}")
            } else if *min > 0 || *max < full {
                format!("{{ let v = {read}; check_bounds({p}, u64::from(v), {min}, {max})?; v }}")
            } else {
                read
            }
        }
        Ty::Bool => format!("r.bool({p})?"),
        Ty::Str {
            ascii,
            len,
            min,
            max,
        } => {
            let f = if *ascii {
                "ascii"
            } else if depth == 0 && interned(path) {
                "interned_str"
            } else {
                "string"
            };
            format!("r.{f}({}, {min}, {max}, {p})?", len.rust())
        }
        Ty::Bytes { len, min, max } => format!("r.bytes({}, {min}, {max}, {p})?", len.rust()),
        Ty::Fixed { size, nonzero } => {
            if *nonzero {
                format!(
                    "{{ let v = r.fixed::<{size}>({p})?; if v.iter().all(|b| *b == 0) {{ return Err(ProtocolError::ZeroValue {{ field: {p} }}); }} v }}"
                )
            } else {
                format!("r.fixed::<{size}>({p})?")
            }
        }
        Ty::Vector {
            count,
            min,
            max,
            item,
        } => {
            let item_min = m.min_size(item);
            let var = format!("items{depth}");
            let inner = decode_expr(m, item, path, depth + 1);
            format!(
                "{{ let n = r.count({}, {min}, {max}, {item_min}, {p})?; let mut {var} = Vec::with_capacity(n); for _ in 0..n {{ {var}.push({inner}); }} {var} }}",
                count.rust()
            )
        }
        Ty::Struct { name, delimited } => match delimited {
            None => format!("{name}::decode_from(r)?"),
            Some((lt, max)) => format!(
                "{{ let block = r.length_delimited({}, 0, {max}, {p})?; let mut sub = r.sub(block); let v = {name}::decode_from(&mut sub)?; sub.finish({p})?; v }}",
                lt.rust()
            ),
        },
        Ty::Enum { name } => format!("{name}::decode_from(r, {p})?"),
        Ty::Union { name } => format!("{name}::decode_from(r)?"),
        Ty::Durable { format, len } => {
            let d = m.durable_def(format);
            let name = d.map(|d| d.body.name.clone()).unwrap_or_default();
            let max = d
                .and_then(|d| d.max_bytes)
                .unwrap_or(len.max())
                .min(len.max());
            format!(
                "{{ let block = r.length_delimited({}, 0, {max}, {p})?; {name}::decode_in(r.sub(block))? }}",
                len.rust()
            )
        }
    }
}

/// Encode statements for a value expression `v` of type `&T`.
fn encode_stmts(m: &Model, ty: &Ty, v: &str, path: &str, depth: usize) -> String {
    let p = lit(path);
    match ty {
        Ty::Int {
            width,
            min,
            max,
            nonzero,
            konst,
        } => {
            let put = match width {
                1 => "u8",
                2 => "u16",
                4 => "u32",
                _ => "u64",
            };
            if let Some(c) = konst {
                return format!("w.{put}({c});");
            }
            let full = match width {
                1 => u64::from(u8::MAX),
                2 => u64::from(u16::MAX),
                4 => u64::from(u32::MAX),
                _ => u64::MAX,
            };
            let check = if *nonzero {
                format!("check_nonzero({p}, u64::from(*{v}), {max})?; ")
            } else if *min > 0 || *max < full {
                format!("check_bounds({p}, u64::from(*{v}), {min}, {max})?; ")
            } else {
                String::new()
            };
            format!("{check}w.{put}(*{v});")
        }
        Ty::Bool => format!("w.bool(*{v});"),
        Ty::Str {
            ascii,
            len,
            min,
            max,
        } => {
            if *ascii {
                format!("w.ascii({}, {min}, {max}, {v}, {p})?;", len.rust())
            } else {
                format!(
                    "w.length_delimited({}, {min}, {max}, {v}.as_bytes(), {p})?;",
                    len.rust()
                )
            }
        }
        Ty::Bytes { len, min, max } => {
            format!(
                "w.length_delimited({}, {min}, {max}, {v}, {p})?;",
                len.rust()
            )
        }
        Ty::Fixed { nonzero, .. } => {
            if *nonzero {
                format!(
                    "if {v}.iter().all(|b| *b == 0) {{ return Err(ProtocolError::ZeroValue {{ field: {p} }}); }} w.put_slice(&{v}[..]);"
                )
            } else {
                format!("w.put_slice(&{v}[..]);")
            }
        }
        Ty::Vector {
            count,
            min,
            max,
            item,
        } => {
            let var = format!("item{depth}");
            let inner = encode_stmts(m, item, &var, path, depth + 1);
            format!(
                "w.count({}, {min}, {max}, {v}.len(), {p})?; for {var} in {v}.iter() {{ {inner} }}",
                count.rust()
            )
        }
        Ty::Struct { delimited, .. } => match delimited {
            None => format!("{v}.encode_to(w)?;"),
            Some((lt, max)) => format!(
                "let at = w.begin_len({lt}); {v}.encode_to(w)?; w.patch_len(at, {lt}, 0, {max}, {p})?;",
                lt = lt.rust()
            ),
        },
        Ty::Enum { .. } => format!("{v}.encode_to(w);"),
        Ty::Union { .. } => format!("{v}.encode_to(w)?;"),
        Ty::Durable { format, len } => {
            let max = m
                .durable_def(format)
                .and_then(|d| d.max_bytes)
                .unwrap_or(len.max())
                .min(len.max());
            format!(
                "let at = w.begin_len({lt}); {v}.encode_blob(w)?; w.patch_len(at, {lt}, 0, {max}, {p})?;",
                lt = len.rust()
            )
        }
    }
}

fn when_cond(m: &Model, w: &crate::model::When, prefix: &str) -> String {
    let f = format!("{prefix}{}", rust_field(&w.field));
    match &w.equals {
        WhenValue::Bool(true) => f,
        WhenValue::Bool(false) => format!("!{f}"),
        WhenValue::Enum { ty, value } => {
            let _ = m;
            format!("{f} == {ty}::{}", pascal(value))
        }
    }
}

fn when_desc(w: &crate::model::When) -> String {
    match &w.equals {
        WhenValue::Bool(b) => format!("{} is {b}", w.field),
        WhenValue::Enum { value, .. } => format!("{} is {value}", w.field),
    }
}

fn emit_struct(m: &Model, o: &mut Out, s: &StructDef, visibility_codec: &str) {
    let doc = s
        .description
        .clone()
        .unwrap_or_else(|| format!("Wire struct `{}`.", s.name));
    o.doc(0, &doc);
    o.line(
        0,
        "#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]",
    );
    o.line(
        0,
        "#[serde(rename_all = \"camelCase\", deny_unknown_fields)]",
    );
    let stored: Vec<&Field> = s
        .fields
        .iter()
        .filter(|f| !matches!(f.ty, Ty::Int { konst: Some(_), .. }))
        .collect();
    if stored.is_empty() {
        o.line(0, &format!("pub struct {} {{}}", s.name));
    } else {
        o.line(0, &format!("pub struct {} {{", s.name));
        for f in &stored {
            let mut d = format!("`{}`: {}.", f.name, wire_desc(&f.ty));
            if let Some(desc) = &f.description {
                d = format!("{d} {desc}");
            }
            if let Some(w) = &f.when {
                d = format!("{d} Present only when {}.", when_desc(w));
            }
            o.doc(1, &d);
            if let Some(a) = serde_attr(&f.ty, f.when.is_some()) {
                o.line(1, a);
            }
            let t = if matches!(f.ty, Ty::Str { .. }) && interned(&format!("{}.{}", s.name, f.name))
            {
                "SharedStr".to_owned()
            } else {
                rust_ty(m, &f.ty)
            };
            let t = if f.when.is_some() {
                format!("Option<{t}>")
            } else {
                t
            };
            o.line(1, &format!("pub {}: {t},", rust_field(&f.name)));
        }
        o.line(0, "}");
    }
    o.line(0, "");
    o.line(0, &format!("impl {} {{", s.name));
    o.doc(
        1,
        "Minimum encoded size in bytes (used for count checks before allocation).",
    );
    o.line(
        1,
        &format!("pub const MIN_ENCODED_LEN: u64 = {};", m.struct_min_size(s)),
    );
    o.line(0, "");
    // decode
    o.doc(1, "Decode from the reader's current position.");
    o.doc(1, "");
    o.doc(1, "# Errors");
    o.doc(
        1,
        "The first [`ProtocolError`] found, before allocating for any length or count.",
    );
    let rparam = if s.fields.is_empty() { "_r" } else { "r" };
    o.line(
        1,
        &format!("{visibility_codec}fn decode_from({rparam}: &mut Reader<'_>) -> Result<Self> {{"),
    );
    for f in &s.fields {
        let path = format!("{}.{}", s.name, f.name);
        let expr = decode_expr(m, &f.ty, &path, 0);
        let var = rust_field(&f.name);
        let var = var.trim_start_matches("r#");
        match &f.when {
            None => {
                if matches!(f.ty, Ty::Int { konst: Some(_), .. }) {
                    o.line(2, &format!("let _ = {expr};"));
                } else {
                    o.line(2, &format!("let {var} = {expr};"));
                }
            }
            Some(w) => {
                let cond = when_cond(m, w, "");
                let cond = cond.replace("r#", "");
                o.line(
                    2,
                    &format!("let {var} = if {cond} {{ Some({expr}) }} else {{ None }};"),
                );
            }
        }
    }
    let names: Vec<String> = stored
        .iter()
        .map(|f| {
            let rf = rust_field(&f.name);
            let var = rf.trim_start_matches("r#").to_string();
            if rf == var {
                rf
            } else {
                format!("{rf}: {var}")
            }
        })
        .collect();
    o.line(2, &format!("let v = Self {{ {} }};", names.join(", ")));
    o.line(2, "v.check()?;");
    o.line(2, "Ok(v)");
    o.line(1, "}");
    o.line(0, "");
    // encode
    o.doc(
        1,
        "Encode at the end of the writer, checking every bound and constraint first.",
    );
    o.doc(1, "");
    o.doc(1, "# Errors");
    o.doc(
        1,
        "The [`ProtocolError`] a decoder would report for the same value.",
    );
    let wparam = if s.fields.is_empty() { "_w" } else { "w" };
    o.line(
        1,
        &format!("{visibility_codec}fn encode_to(&self, {wparam}: &mut Writer) -> Result<()> {{"),
    );
    o.line(2, "self.check()?;");
    for f in &s.fields {
        let path = format!("{}.{}", s.name, f.name);
        let rf = rust_field(&f.name);
        match &f.when {
            None => {
                let v = format!("(&self.{rf})");
                if matches!(f.ty, Ty::Int { konst: Some(_), .. }) {
                    o.line(2, &encode_stmts(m, &f.ty, "_", &path, 0));
                } else {
                    o.line(
                        2,
                        &format!("{{ {} }}", encode_stmts(m, &f.ty, &v, &path, 0)),
                    );
                }
            }
            Some(_) => {
                o.line(
                    2,
                    &format!(
                        "if let Some(inner) = &self.{rf} {{ {} }}",
                        encode_stmts(m, &f.ty, "inner", &path, 0)
                    ),
                );
            }
        }
    }
    o.line(2, "Ok(())");
    o.line(1, "}");
    o.line(0, "");
    // check
    o.doc(1, "Check `when` presence rules and declared constraints.");
    o.line(1, "fn check(&self) -> Result<()> {");
    for f in &s.fields {
        if let Some(w) = &f.when {
            let cond = when_cond(m, w, "self.");
            let msg = format!("{}.{} is present iff {}", s.name, f.name, when_desc(w));
            o.line(
                2,
                &format!(
                    "if ({cond}) != self.{}.is_some() {{ return Err(ProtocolError::ConstraintViolated {{ constraint: {} }}); }}",
                    rust_field(&f.name),
                    lit(&msg)
                ),
            );
        }
    }
    for c in &s.constraints {
        match c {
            Constraint::NotAllZero {
                fields,
                description,
            } => {
                let cond: Vec<String> = fields
                    .iter()
                    .map(|f| format!("self.{} == 0", rust_field(f)))
                    .collect();
                o.line(
                    2,
                    &format!(
                        "if {} {{ return Err(ProtocolError::ConstraintViolated {{ constraint: {} }}); }}",
                        cond.join(" && "),
                        lit(description)
                    ),
                );
            }
            Constraint::SameObject {
                fields,
                description,
            } => {
                let (a, b) = (rust_field(&fields[0]), rust_field(&fields[1]));
                o.line(
                    2,
                    &format!(
                        "if self.{a}.object_kind != self.{b}.object_kind || self.{a}.object_id != self.{b}.object_id {{ return Err(ProtocolError::ConstraintViolated {{ constraint: {} }}); }}",
                        lit(description)
                    ),
                );
            }
            Constraint::ObjectKind {
                field,
                equals,
                description,
            } => {
                o.line(
                    2,
                    &format!(
                        "if self.{}.object_kind != ObjectKind::{} {{ return Err(ProtocolError::ConstraintViolated {{ constraint: {} }}); }}",
                        rust_field(field),
                        pascal(equals),
                        lit(description)
                    ),
                );
            }
            Constraint::LegFromField { .. } => {}
        }
    }
    o.line(2, "Ok(())");
    o.line(1, "}");
    // implied leg
    if let Some(Constraint::LegFromField { field, ty, map, .. }) = s
        .constraints
        .iter()
        .find(|c| matches!(c, Constraint::LegFromField { .. }))
    {
        o.line(0, "");
        o.doc(
            1,
            "The leg this record must travel on, implied by its body.",
        );
        o.line(1, "pub fn implied_leg(&self) -> Leg {");
        o.line(2, &format!("match self.{} {{", rust_field(field)));
        for (k, v) in map {
            o.line(3, &format!("{ty}::{} => Leg::{},", pascal(k), pascal(v)));
        }
        o.line(2, "}");
        o.line(1, "}");
    }
    o.line(0, "}");
    o.line(0, "");
}

fn emit_enum(o: &mut Out, e: &EnumDef) {
    let doc = e
        .description
        .clone()
        .unwrap_or_else(|| format!("Wire enum `{}`.", e.name));
    o.doc(0, &doc);
    o.line(
        0,
        "#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]",
    );
    o.line(0, "#[serde(rename_all = \"camelCase\")]");
    let repr = if e.width == 1 { "u8" } else { "u16" };
    o.line(0, &format!("#[repr({repr})]"));
    o.line(0, &format!("pub enum {} {{", e.name));
    for v in &e.values {
        let d = match &v.description {
            Some(d) => format!("`{}` = {}. {d}", v.name, v.value),
            None => format!("`{}` = {}.", v.name, v.value),
        };
        o.doc(1, &d);
        o.line(1, &format!("{} = {},", pascal(&v.name), v.value));
    }
    o.line(0, "}");
    o.line(0, "");
    o.line(0, &format!("impl {} {{", e.name));
    o.doc(1, "Every value, in declaration order.");
    let all: Vec<String> = e
        .values
        .iter()
        .map(|v| format!("Self::{}", pascal(&v.name)))
        .collect();
    o.line(
        1,
        &format!(
            "pub const ALL: [Self; {}] = [{}];",
            e.values.len(),
            all.join(", ")
        ),
    );
    o.line(0, "");
    o.doc(1, "The wire value.");
    o.line(
        1,
        &format!("pub const fn to_wire(self) -> {repr} {{ self as {repr} }}"),
    );
    o.line(0, "");
    o.doc(1, "The schema name of the value.");
    o.line(1, "pub const fn name(self) -> &'static str {");
    o.line(2, "match self {");
    for v in &e.values {
        o.line(
            3,
            &format!("Self::{} => {},", pascal(&v.name), lit(&v.name)),
        );
    }
    o.line(2, "}");
    o.line(1, "}");
    o.line(0, "");
    o.doc(1, "Map a wire value.");
    o.doc(1, "");
    o.doc(1, "# Errors");
    o.doc(
        1,
        "[`ProtocolError::UnknownEnumValue`] for a value the schema does not define.",
    );
    o.line(
        1,
        &format!("pub fn from_wire(value: {repr}, field: &'static str) -> Result<Self> {{"),
    );
    o.line(2, "match value {");
    for v in &e.values {
        o.line(3, &format!("{} => Ok(Self::{}),", v.value, pascal(&v.name)));
    }
    o.line(
        3,
        "other => Err(ProtocolError::UnknownEnumValue { field, value: u64::from(other) }),",
    );
    o.line(2, "}");
    o.line(1, "}");
    o.line(0, "");
    o.line(
        1,
        "pub(crate) fn decode_from(r: &mut Reader<'_>, field: &'static str) -> Result<Self> {",
    );
    o.line(2, &format!("Self::from_wire(r.{repr}(field)?, field)"));
    o.line(1, "}");
    o.line(0, "");
    o.line(1, "pub(crate) fn encode_to(self, w: &mut Writer) {");
    o.line(2, &format!("w.{repr}(self.to_wire());"));
    o.line(1, "}");
    o.line(0, "}");
    o.line(0, "");
}

fn emit_union(m: &Model, o: &mut Out, u: &UnionDef) {
    for c in &u.cases {
        if let Some(b) = &c.body {
            emit_struct(m, o, b, "pub(crate) ");
        }
    }
    let doc = u
        .description
        .clone()
        .unwrap_or_else(|| format!("Wire union `{}`.", u.name));
    o.doc(0, &doc);
    o.line(
        0,
        "#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]",
    );
    o.line(0, "#[serde(tag = \"kind\", rename_all = \"camelCase\")]");
    o.line(0, &format!("pub enum {} {{", u.name));
    for c in &u.cases {
        o.doc(1, &format!("Case `{}` (tag {}).", c.name, c.tag));
        match &c.body {
            Some(b) => o.line(1, &format!("{}({}),", pascal(&c.name), b.name)),
            None => o.line(1, &format!("{},", pascal(&c.name))),
        }
    }
    o.line(0, "}");
    o.line(0, "");
    let tagp = lit(&format!("{}.kind", u.name));
    let bodyp = lit(&format!("{}.body", u.name));
    o.line(0, &format!("impl {} {{", u.name));
    o.doc(1, "The tag byte of this case.");
    o.line(1, "pub const fn tag(&self) -> u8 {");
    o.line(2, "match self {");
    for c in &u.cases {
        let pat = if c.body.is_some() { "(_)" } else { "" };
        o.line(3, &format!("Self::{}{pat} => {},", pascal(&c.name), c.tag));
    }
    o.line(2, "}");
    o.line(1, "}");
    o.line(0, "");
    o.line(
        1,
        "pub(crate) fn decode_from(r: &mut Reader<'_>) -> Result<Self> {",
    );
    o.line(2, &format!("let tag = r.u8({tagp})?;"));
    let known: Vec<String> = u.cases.iter().map(|c| c.tag.to_string()).collect();
    o.line(
        2,
        &format!(
            "if !matches!(tag, {}) {{ return Err(ProtocolError::UnknownEnumValue {{ field: {tagp}, value: u64::from(tag) }}); }}",
            known.join(" | ")
        ),
    );
    o.line(
        2,
        &format!(
            "let block = r.length_delimited({}, 0, {}, {bodyp})?;",
            u.len.rust(),
            u.len.max()
        ),
    );
    o.line(2, "let mut sub = r.sub(block);");
    o.line(2, "let r = &mut sub;");
    o.line(2, "let v = match tag {");
    for c in &u.cases {
        match &c.body {
            Some(b) => o.line(
                3,
                &format!(
                    "{} => Self::{}({}::decode_from(r)?),",
                    c.tag,
                    pascal(&c.name),
                    b.name
                ),
            ),
            None => o.line(3, &format!("{} => Self::{},", c.tag, pascal(&c.name))),
        }
    }
    o.line(
        3,
        &format!("other => return Err(ProtocolError::UnknownEnumValue {{ field: {tagp}, value: u64::from(other) }}),"),
    );
    o.line(2, "};");
    o.line(2, &format!("r.finish({})?;", lit(&u.name)));
    o.line(2, "Ok(v)");
    o.line(1, "}");
    o.line(0, "");
    o.line(
        1,
        "pub(crate) fn encode_to(&self, w: &mut Writer) -> Result<()> {",
    );
    o.line(2, "w.u8(self.tag());");
    o.line(2, &format!("let at = w.begin_len({});", u.len.rust()));
    o.line(2, "match self {");
    for c in &u.cases {
        match &c.body {
            Some(_) => o.line(
                3,
                &format!("Self::{}(v) => v.encode_to(w)?,", pascal(&c.name)),
            ),
            None => o.line(3, &format!("Self::{} => {{}}", pascal(&c.name))),
        }
    }
    o.line(2, "}");
    o.line(
        2,
        &format!(
            "w.patch_len(at, {}, 0, {}, {bodyp})",
            u.len.rust(),
            u.len.max()
        ),
    );
    o.line(1, "}");
    o.line(0, "}");
    o.line(0, "");
}

fn emit_durable(m: &Model, o: &mut Out, d: &DurableDef) {
    emit_struct(m, o, &d.body, "pub(crate) ");
    let n = &d.body.name;
    let ctx = lit(&d.name);
    o.line(0, &format!("impl {n} {{"));
    o.doc(1, "Schema name of this durable format.");
    o.line(1, &format!("pub const FORMAT_NAME: &'static str = {ctx};"));
    o.doc(1, "Leading magic bytes.");
    o.line(
        1,
        &format!(
            "pub const MAGIC: [u8; 4] = [0x{:02x}, 0x{:02x}, 0x{:02x}, 0x{:02x}];",
            d.magic[0], d.magic[1], d.magic[2], d.magic[3]
        ),
    );
    o.doc(1, "Format version byte.");
    o.line(1, &format!("pub const VERSION: u8 = {};", d.version));
    o.doc(
        1,
        "Whether a CRC-32C trailer over all preceding bytes ends the format.",
    );
    o.line(
        1,
        &format!("pub const CRC_TRAILER: bool = {};", d.crc_trailer),
    );
    o.doc(1, "Largest allowed encoded size.");
    o.line(
        1,
        &format!(
            "pub const MAX_BYTES: u64 = {};",
            d.max_bytes.unwrap_or(u64::MAX)
        ),
    );
    o.line(0, "");
    o.doc(1, "Decode a complete blob: magic, version, fields, optional CRC-32C trailer, no trailing bytes.");
    o.doc(1, "");
    o.doc(1, "# Errors");
    o.doc(1, "`OutOfBounds` (too large), `BadMagic`, `UnsupportedVersion`, field errors, `ChecksumMismatch`, `TrailingBytes`.");
    o.line(1, "pub fn decode(bytes: &[u8]) -> Result<Self> {");
    o.line(2, "Self::decode_in(Reader::new(bytes))");
    o.line(1, "}");
    o.line(0, "");
    o.doc(
        1,
        "Decode a complete blob held in shared bytes; byte fields are zero-copy slices of it.",
    );
    o.doc(1, "");
    o.doc(1, "# Errors");
    o.doc(1, "As [`Self::decode`].");
    o.line(1, "pub fn decode_shared(bytes: &Bytes) -> Result<Self> {");
    o.line(2, "Self::decode_in(Reader::shared(bytes))");
    o.line(1, "}");
    o.line(0, "");
    o.line(
        1,
        "pub(crate) fn decode_in(mut reader: Reader<'_>) -> Result<Self> {",
    );
    o.line(2, "let bytes = reader.rest();");
    o.line(
        2,
        &format!(
            "if bytes.len() as u64 > Self::MAX_BYTES {{ return Err(ProtocolError::OutOfBounds {{ field: {ctx}, value: bytes.len() as u64, min: 0, max: Self::MAX_BYTES }}); }}"
        ),
    );
    o.line(2, "let r = &mut reader;");
    o.line(
        2,
        &format!("if r.fixed::<4>({ctx})? != Self::MAGIC {{ return Err(ProtocolError::BadMagic {{ context: {ctx} }}); }}"),
    );
    o.line(2, &format!("let version = r.u8({ctx})?;"));
    o.line(
        2,
        &format!("if version != Self::VERSION {{ return Err(ProtocolError::UnsupportedVersion {{ context: {ctx}, found: u64::from(version) }}); }}"),
    );
    o.line(2, "let v = Self::decode_from(r)?;");
    if d.crc_trailer {
        o.line(2, "let covered = r.position();");
        o.line(2, &format!("let declared = r.u32({ctx})?;"));
        o.line(2, "let computed = crate::crc::crc32c(&bytes[..covered]);");
        o.line(
            2,
            &format!("if declared != computed {{ return Err(ProtocolError::ChecksumMismatch {{ context: {ctx}, declared, computed }}); }}"),
        );
    }
    o.line(2, &format!("r.finish({ctx})?;"));
    o.line(2, "Ok(v)");
    o.line(1, "}");
    o.line(0, "");
    o.doc(1, "Encode the complete blob.");
    o.doc(1, "");
    o.doc(1, "# Errors");
    o.doc(1, "Bound or constraint violations, or `OutOfBounds` when the result exceeds [`Self::MAX_BYTES`].");
    o.line(1, "pub fn encode(&self) -> Result<Vec<u8>> {");
    o.line(2, "let mut w = Writer::new();");
    o.line(2, "self.encode_blob(&mut w)?;");
    o.line(2, "Ok(w.into_vec())");
    o.line(1, "}");
    o.line(0, "");
    o.doc(
        1,
        "Append the complete blob (magic, version, fields, trailer) to a writer.",
    );
    o.doc(1, "");
    o.doc(1, "# Errors");
    o.doc(1, "As [`Self::encode`].");
    o.line(
        1,
        "pub fn encode_blob(&self, w: &mut Writer) -> Result<()> {",
    );
    o.line(2, "let start = w.len();");
    o.line(2, "w.put_slice(&Self::MAGIC);");
    o.line(2, "w.u8(Self::VERSION);");
    o.line(2, "self.encode_to(w)?;");
    if d.crc_trailer {
        o.line(2, "let crc = crate::crc::crc32c(&w.as_slice()[start..]);");
        o.line(2, "w.u32(crc);");
    }
    o.line(2, "let len = (w.len() - start) as u64;");
    o.line(
        2,
        &format!("if len > Self::MAX_BYTES {{ return Err(ProtocolError::OutOfBounds {{ field: {ctx}, value: len, min: 0, max: Self::MAX_BYTES }}); }}"),
    );
    o.line(2, "Ok(())");
    o.line(1, "}");
    o.line(0, "}");
    o.line(0, "");
}

fn emit_commands(m: &Model, o: &mut Out) {
    let cmds = &m.commands;
    o.doc(
        0,
        "Defined command IDs of wire v1 (wire §3). Reserved IDs have no variant.",
    );
    o.line(0, "#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]");
    o.line(0, "#[serde(rename_all = \"camelCase\")]");
    o.line(0, "#[repr(u8)]");
    o.line(0, "pub enum CommandId {");
    for c in cmds {
        o.doc(1, &format!("`{}` ({}).", c.name, c.id));
        o.line(1, &format!("{} = {},", pascal(&c.name), c.id));
    }
    o.line(0, "}");
    o.line(0, "");
    o.line(0, "impl CommandId {");
    o.doc(1, "Every defined command, by ID.");
    let all: Vec<String> = cmds
        .iter()
        .map(|c| format!("Self::{}", pascal(&c.name)))
        .collect();
    o.line(
        1,
        &format!(
            "pub const ALL: [Self; {}] = [{}];",
            cmds.len(),
            all.join(", ")
        ),
    );
    o.line(0, "");
    o.doc(1, "The wire ID.");
    o.line(1, "pub const fn id(self) -> u8 { self as u8 }");
    o.line(0, "");
    o.doc(1, "Map a wire ID.");
    o.doc(1, "");
    o.doc(1, "# Errors");
    o.doc(1, "[`ProtocolError::ReservedCommand`] for reserved IDs, [`ProtocolError::UnknownCommand`] for 0.");
    o.line(1, "pub fn from_wire(id: u8) -> Result<Self> {");
    o.line(2, "match id {");
    for c in cmds {
        o.line(3, &format!("{} => Ok(Self::{}),", c.id, pascal(&c.name)));
    }
    o.line(
        3,
        "other if is_reserved_command(other) => Err(ProtocolError::ReservedCommand { id: other }),",
    );
    o.line(
        3,
        "other => Err(ProtocolError::UnknownCommand { id: other }),",
    );
    o.line(2, "}");
    o.line(1, "}");
    o.line(0, "");
    o.doc(1, "Look up a command by schema name.");
    o.line(1, "pub fn from_name(name: &str) -> Option<Self> {");
    o.line(2, "Self::ALL.into_iter().find(|c| c.name() == name)");
    o.line(1, "}");
    o.line(0, "");
    o.doc(1, "The schema name.");
    o.line(
        1,
        "pub const fn name(self) -> &'static str { self.spec().name }",
    );
    o.line(0, "");
    o.doc(1, "The schema declaration of this command.");
    o.line(1, "pub const fn spec(self) -> &'static CommandSpec {");
    o.line(2, "match self {");
    for (i, c) in cmds.iter().enumerate() {
        o.line(
            3,
            &format!("Self::{} => &COMMAND_SPECS[{i}],", pascal(&c.name)),
        );
    }
    o.line(2, "}");
    o.line(1, "}");
    o.line(0, "}");
    o.line(0, "");
    // Specs.
    o.doc(0, "Declarations of every defined command, in ID order.");
    o.line(
        0,
        &format!(
            "pub static COMMAND_SPECS: [CommandSpec; {}] = [",
            cmds.len()
        ),
    );
    for c in cmds {
        let legs: Vec<String> = c
            .legs
            .iter()
            .map(|l| format!("Leg::{}", pascal(l)))
            .collect();
        let replies: Vec<String> = c
            .replies
            .iter()
            .map(|r| format!("CommandId::{}", pascal(r)))
            .collect();
        let irt: Vec<String> = c
            .in_reply_to
            .iter()
            .map(|r| format!("CommandId::{}", pascal(r)))
            .collect();
        let paired = match &c.paired_by {
            Some((f, a)) => format!("Some(({}, CommandId::{}))", lit(f), pascal(a)),
            None => "None".into(),
        };
        o.line(1, "CommandSpec {");
        o.line(2, &format!("id: {},", c.id));
        o.line(2, &format!("name: {},", lit(&c.name)));
        o.line(2, &format!("layer: Layer::{},", pascal(&c.layer)));
        o.line(2, &format!("payload: PayloadRule::{},", pascal(&c.payload)));
        o.line(2, &format!("allowed_flags: 0x{:02x},", c.flags));
        o.line(2, &format!("route_mesh: {},", c.route_mesh));
        o.line(2, &format!("client_server: {},", c.client_server));
        o.line(2, &format!("legs: &[{}],", legs.join(", ")));
        o.line(2, &format!("replies: &[{}],", replies.join(", ")));
        o.line(2, &format!("in_reply_to: &[{}],", irt.join(", ")));
        o.line(2, &format!("paired_by: {paired},"));
        o.line(2, &format!("flow_charged: {},", c.flow_charged));
        o.line(2, &format!("source: SourceRule::{},", pascal(&c.source)));
        o.line(1, "},");
    }
    o.line(0, "];");
    o.line(0, "");
    // Reserved.
    o.doc(0, "Reserved command ID ranges (inclusive) with their former names: never sent, never accepted.");
    o.line(
        0,
        "pub const RESERVED_COMMAND_IDS: &[(u8, u8, Option<&str>)] = &[",
    );
    for (a, b, n) in &m.reserved {
        let n = match n {
            Some(n) => format!("Some({})", lit(n)),
            None => "None".into(),
        };
        o.line(1, &format!("({a}, {b}, {n}),"));
    }
    o.line(0, "];");
    o.line(0, "");
    o.doc(0, "Whether `id` is a reserved command ID.");
    o.line(0, "pub const fn is_reserved_command(id: u8) -> bool {");
    let conds: Vec<String> = m
        .reserved
        .iter()
        .map(|(a, b, _)| {
            if a == b {
                format!("id == {a}")
            } else {
                format!("({a} <= id && id <= {b})")
            }
        })
        .collect();
    o.line(1, &conds.join(" || "));
    o.line(0, "}");
    o.line(0, "");
    // Body enum.
    o.doc(0, "A decoded command body of any defined command.");
    o.line(
        0,
        "#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]",
    );
    o.line(
        0,
        "#[serde(tag = \"command\", content = \"body\", rename_all = \"camelCase\")]",
    );
    o.line(0, "pub enum CommandBody {");
    for c in cmds {
        o.doc(1, &format!("Body of `{}` ({}).", c.name, c.id));
        o.line(1, &format!("{}({}),", pascal(&c.name), c.body.name));
    }
    o.line(0, "}");
    o.line(0, "");
    o.line(0, "impl CommandBody {");
    o.doc(1, "The command this body belongs to.");
    o.line(1, "pub const fn command(&self) -> CommandId {");
    o.line(2, "match self {");
    for c in cmds {
        o.line(
            3,
            &format!(
                "Self::{}(_) => CommandId::{},",
                pascal(&c.name),
                pascal(&c.name)
            ),
        );
    }
    o.line(2, "}");
    o.line(1, "}");
    o.line(0, "");
    o.doc(
        1,
        "The schema declaration of this body's command (layer, flow charge, source rule, legs).",
    );
    o.line(1, "pub const fn spec(&self) -> &'static CommandSpec {");
    o.line(2, "self.command().spec()");
    o.line(1, "}");
    o.line(0, "");
    o.doc(1, "The sending node the body names (commands whose source rule is [`SourceRule::Body`]); `None` for the others.");
    o.line(1, "pub const fn source(&self) -> Option<&NodeFence> {");
    o.line(2, "match self {");
    for c in cmds {
        if c.source == "body" {
            o.line(
                3,
                &format!("Self::{}(b) => Some(&b.source),", pascal(&c.name)),
            );
        } else {
            o.line(3, &format!("Self::{}(_) => None,", pascal(&c.name)));
        }
    }
    o.line(2, "}");
    o.line(1, "}");
    o.line(0, "");
    o.doc(1, "Decode the body of `command` from the reader's position (tails and trailing bytes are the framing's job).");
    o.doc(1, "");
    o.doc(1, "# Errors");
    o.doc(1, "The first [`ProtocolError`] in the body.");
    o.line(
        1,
        "pub fn decode_from(command: CommandId, r: &mut Reader<'_>) -> Result<Self> {",
    );
    o.line(2, "Ok(match command {");
    for c in cmds {
        o.line(
            3,
            &format!(
                "CommandId::{p} => Self::{p}({}::decode_from(r)?),",
                c.body.name,
                p = pascal(&c.name)
            ),
        );
    }
    o.line(2, "})");
    o.line(1, "}");
    o.line(0, "");
    o.doc(1, "Encode the body.");
    o.doc(1, "");
    o.doc(1, "# Errors");
    o.doc(1, "Bound or constraint violations.");
    o.line(1, "pub fn encode_to(&self, w: &mut Writer) -> Result<()> {");
    o.line(2, "match self {");
    for c in cmds {
        o.line(
            3,
            &format!("Self::{}(b) => b.encode_to(w),", pascal(&c.name)),
        );
    }
    o.line(2, "}");
    o.line(1, "}");
    o.line(0, "");
    o.doc(
        1,
        "The leg the body itself implies (`legFromField` constraint), if any.",
    );
    o.line(1, "pub fn implied_leg(&self) -> Option<Leg> {");
    o.line(2, "match self {");
    for c in cmds {
        let has = c
            .body
            .constraints
            .iter()
            .any(|k| matches!(k, Constraint::LegFromField { .. }));
        if has {
            o.line(
                3,
                &format!("Self::{}(b) => Some(b.implied_leg()),", pascal(&c.name)),
            );
        }
    }
    o.line(3, "_ => None,");
    o.line(2, "}");
    o.line(1, "}");
    o.line(0, "}");
    o.line(0, "");
}

fn emit_command_bodies(m: &Model, o: &mut Out, c: &CommandDef) {
    let mut body = c.body.clone();
    let d = body
        .description
        .clone()
        .unwrap_or_else(|| format!("Body of command `{}`.", c.name));
    body.description = Some(format!(
        "Body of command {} `{}` ({}, payload {}, legs {}).\n\n{d}",
        c.id,
        c.name,
        c.layer,
        c.payload,
        c.legs.join("/")
    ));
    emit_struct(m, o, &body, "pub(crate) ");
}

/// Generate the complete `generated.rs`.
pub fn generate(m: &Model) -> String {
    let mut o = Out { s: String::new() };
    o.line(
        0,
        "// @generated by zlink-wire-codegen from protocol/schema/service-wire-v1.schema.json.",
    );
    o.line(
        0,
        "// Do not edit: change the schema and run `cargo run -p zlink-wire-codegen -- generate`.",
    );
    o.line(
        0,
        "// A test (protocol/tests/generated_fresh.rs) fails when this file is stale.",
    );
    o.line(0, "");
    o.line(
        0,
        "//! Codec generated from `service-wire-v1.schema.json`: command table, command bodies,",
    );
    o.line(
        0,
        "//! named types and durable formats (wire §1 규범 생성 기준).",
    );
    o.line(0, "");
    o.line(0, "#![allow(clippy::all, clippy::pedantic, unused_parens, unused_braces, unused_comparisons)]");
    o.line(0, "");
    o.line(0, "use bytes::Bytes;");
    o.line(0, "use serde::{Deserialize, Serialize};");
    o.line(0, "");
    o.line(
        0,
        "use crate::codec::{LenType, Reader, Writer, check_bounds, check_nonzero};",
    );
    o.line(0, "use crate::error::{ProtocolError, Result};");
    o.line(0, "use crate::shared_str::SharedStr;");
    o.line(0, "");
    o.doc(0, "Wire major version (frame 0 byte 2).");
    o.line(0, &format!("pub const WIRE_MAJOR: u8 = {};", m.wire_major));
    o.doc(0, "Capability every peer must advertise.");
    o.line(
        0,
        &format!(
            "pub const REQUIRED_CAPABILITY: &str = {};",
            lit(&m.capability)
        ),
    );
    o.doc(0, "Frame 0 magic.");
    o.line(0, "pub const MAGIC: [u8; 2] = [0x5a, 0x4d];");
    o.line(0, "");
    o.doc(0, "Limits declared by the schema.");
    o.line(0, "pub mod limits {");
    for (k, v) in &m.limits {
        o.doc(1, &format!("`{k}`."));
        o.line(
            1,
            &format!("pub const {}: u64 = {v};", snake(k).to_uppercase()),
        );
    }
    o.line(0, "}");
    o.line(0, "");
    o.doc(0, "Frame 0 flag bits (wire §2).");
    o.line(0, "pub mod flags {");
    for f in &m.flags {
        o.doc(1, f.description.as_deref().unwrap_or(&f.name));
        o.line(
            1,
            &format!(
                "pub const {}: u8 = 0x{:02x};",
                snake(&f.name).to_uppercase(),
                f.bit
            ),
        );
    }
    let all = m.flags.iter().fold(0u8, |a, f| a | f.bit);
    o.doc(1, "Every defined flag bit.");
    o.line(1, &format!("pub const DEFINED: u8 = 0x{all:02x};"));
    o.line(0, "}");
    o.line(0, "");
    o.doc(0, "The leg a record travels on (schema `legs`).");
    o.line(
        0,
        "#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]",
    );
    o.line(0, "#[serde(rename_all = \"camelCase\")]");
    o.line(0, "pub enum Leg {");
    o.doc(1, "One-way record.");
    o.line(1, "Send,");
    o.doc(1, "Opens a request.");
    o.line(1, "Request,");
    o.doc(1, "Answers a request.");
    o.line(1, "Reply,");
    o.line(0, "}");
    o.line(0, "");
    o.line(0, "impl Leg {");
    o.doc(1, "Schema name.");
    o.line(1, "pub const fn name(self) -> &'static str {");
    o.line(2, "match self { Self::Send => \"send\", Self::Request => \"request\", Self::Reply => \"reply\" }");
    o.line(1, "}");
    o.line(0, "}");
    o.line(0, "");
    o.doc(0, "Command layer (wire §3).");
    o.line(0, "#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]");
    o.line(0, "pub enum Layer {");
    o.doc(1, "Runtime-to-runtime; never enters an application queue.");
    o.line(1, "Infrastructure,");
    o.doc(1, "Delivered to application handlers.");
    o.line(1, "Application,");
    o.line(0, "}");
    o.line(0, "");
    o.doc(0, "Application payload rule (wire §3).");
    o.line(0, "#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]");
    o.line(0, "pub enum PayloadRule {");
    o.doc(1, "No payload frame.");
    o.line(1, "None,");
    o.doc(1, "A payload frame must be present.");
    o.line(1, "Required,");
    o.doc(1, "A payload frame may be present.");
    o.line(1, "Optional,");
    o.line(0, "}");
    o.line(0, "");
    o.doc(0, "Schema declaration of one command.");
    o.line(0, "#[derive(Debug, Clone, Copy, PartialEq, Eq)]");
    o.line(0, "pub struct CommandSpec {");
    o.doc(1, "Wire ID.");
    o.line(1, "pub id: u8,");
    o.doc(1, "Schema name.");
    o.line(1, "pub name: &'static str,");
    o.doc(1, "Layer.");
    o.line(1, "pub layer: Layer,");
    o.doc(1, "Payload rule.");
    o.line(1, "pub payload: PayloadRule,");
    o.doc(1, "Allowed flag bits.");
    o.line(1, "pub allowed_flags: u8,");
    o.doc(1, "Allowed on RouteMesh connections.");
    o.line(1, "pub route_mesh: bool,");
    o.doc(1, "Allowed on ClientServer connections.");
    o.line(1, "pub client_server: bool,");
    o.doc(1, "Legs the command may travel on.");
    o.line(1, "pub legs: &'static [Leg],");
    o.doc(
        1,
        "For requests: the commands that may answer on the reply leg.",
    );
    o.line(1, "pub replies: &'static [CommandId],");
    o.doc(1, "For reply-leg commands: the requests they answer.");
    o.line(1, "pub in_reply_to: &'static [CommandId],");
    o.doc(
        1,
        "Field-paired answer (liveness probe/ack), matched by the named body field.",
    );
    o.line(1, "pub paired_by: Option<(&'static str, CommandId)>,");
    o.doc(
        1,
        "Charged to the connection's flow-control credit (schema `flowCharged`): the record must carry exactly the charge its size implies.",
    );
    o.line(1, "pub flow_charged: bool,");
    o.doc(
        1,
        "Where the record's sending node identity comes from (schema `source`).",
    );
    o.line(1, "pub source: SourceRule,");
    o.line(0, "}");
    o.line(0, "");
    o.doc(
        0,
        "Where a record's sending node identity comes from (schema `source`).",
    );
    o.line(0, "#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]");
    o.line(0, "pub enum SourceRule {");
    o.doc(1, "The body's `source` field (a NodeFence); the receiver checks it names the connection's admitted peer.");
    o.line(1, "Body,");
    o.doc(
        1,
        "The body names no sender: it is the connection's admitted peer.",
    );
    o.line(1, "Connection,");
    o.doc(1, "No sender identity is carried or checked.");
    o.line(1, "None,");
    o.line(0, "}");
    o.line(0, "");
    for e in &m.enums {
        emit_enum(&mut o, e);
    }
    for s in &m.structs {
        emit_struct(m, &mut o, s, "pub(crate) ");
    }
    for u in &m.unions {
        emit_union(m, &mut o, u);
    }
    for d in &m.durables {
        emit_durable(m, &mut o, d);
    }
    // Durable dispatch.
    o.doc(0, "A decoded durable blob of any format.");
    o.line(
        0,
        "#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]",
    );
    o.line(0, "#[serde(tag = \"format\", content = \"value\")]");
    o.line(0, "pub enum DurableValue {");
    for d in &m.durables {
        o.doc(1, &format!("`{}`.", d.name));
        o.line(1, &format!("#[serde(rename = {})]", lit(&d.name)));
        o.line(1, &format!("{}({}),", d.body.name, d.body.name));
    }
    o.line(0, "}");
    o.line(0, "");
    o.line(0, "impl DurableValue {");
    o.doc(1, "Schema names of every durable format.");
    let names: Vec<String> = m.durables.iter().map(|d| lit(&d.name)).collect();
    o.line(
        1,
        &format!(
            "pub const FORMAT_NAMES: [&'static str; {}] = [{}];",
            names.len(),
            names.join(", ")
        ),
    );
    o.line(0, "");
    o.doc(1, "Decode any durable blob, dispatching on its magic.");
    o.doc(1, "");
    o.doc(1, "# Errors");
    o.doc(
        1,
        "`BadMagic` when no format has these magic bytes, else the format's own errors.",
    );
    o.line(1, "pub fn decode_any(bytes: &[u8]) -> Result<Self> {");
    o.line(2, "let magic = bytes.get(..4);");
    for d in &m.durables {
        o.line(
            2,
            &format!(
                "if magic == Some(&{n}::MAGIC[..]) {{ return Ok(Self::{n}({n}::decode(bytes)?)); }}",
                n = d.body.name
            ),
        );
    }
    o.line(2, "if bytes.len() < 4 { return Err(ProtocolError::Incomplete { field: \"durable magic\", needed: 4, remaining: bytes.len() as u64 }); }");
    o.line(2, "Err(ProtocolError::BadMagic { context: \"durable\" })");
    o.line(1, "}");
    o.line(0, "");
    o.doc(1, "Decode a blob of the named format.");
    o.doc(1, "");
    o.doc(1, "# Errors");
    o.doc(
        1,
        "`None` for an unknown format name; otherwise the format's decode errors.",
    );
    o.line(
        1,
        "pub fn decode_named(format: &str, bytes: &[u8]) -> Option<Result<Self>> {",
    );
    o.line(2, "match format {");
    for d in &m.durables {
        o.line(
            3,
            &format!(
                "{} => Some({n}::decode(bytes).map(Self::{n})),",
                lit(&d.name),
                n = d.body.name
            ),
        );
    }
    o.line(3, "_ => None,");
    o.line(2, "}");
    o.line(1, "}");
    o.line(0, "");
    o.doc(1, "Encode the blob.");
    o.doc(1, "");
    o.doc(1, "# Errors");
    o.doc(1, "Bound or constraint violations.");
    o.line(1, "pub fn encode(&self) -> Result<Vec<u8>> {");
    o.line(2, "match self {");
    for d in &m.durables {
        o.line(3, &format!("Self::{}(v) => v.encode(),", d.body.name));
    }
    o.line(2, "}");
    o.line(1, "}");
    o.line(0, "}");
    o.line(0, "");
    emit_commands(m, &mut o);
    for c in &m.commands {
        emit_command_bodies(m, &mut o, c);
    }
    let mut s = o.s;
    while s.ends_with("\n\n") {
        s.pop();
    }
    s
}
