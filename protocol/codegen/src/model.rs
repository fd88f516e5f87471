//! The validated schema model.
//!
//! [`Model::from_json`] is the schema self-test (wire §1 Validator): it resolves every `$ref`,
//! `$bound` and `when`, checks IDs, names, enum values, bounds, legs, pairings and constraints,
//! rejects unknown keys, and returns every problem it finds. Nothing is generated from a schema
//! that fails it.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

/// One problem found in the schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaError {
    /// JSON-pointer-like location, e.g. `commands[3].body[1]`.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for SchemaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Width of a length or count prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LenType {
    /// One byte.
    U8,
    /// Two bytes.
    U16,
    /// Four bytes.
    U32,
}

impl LenType {
    fn parse(s: &str) -> Option<Self> {
        match s {
            "u8" => Some(Self::U8),
            "u16" => Some(Self::U16),
            "u32" => Some(Self::U32),
            _ => None,
        }
    }

    /// Encoded size.
    pub fn size(self) -> u64 {
        match self {
            Self::U8 => 1,
            Self::U16 => 2,
            Self::U32 => 4,
        }
    }

    /// Largest representable value.
    pub fn max(self) -> u64 {
        match self {
            Self::U8 => u64::from(u8::MAX),
            Self::U16 => u64::from(u16::MAX),
            Self::U32 => u64::from(u32::MAX),
        }
    }

    /// Rust path of the runtime `LenType` variant.
    pub fn rust(self) -> &'static str {
        match self {
            Self::U8 => "LenType::U8",
            Self::U16 => "LenType::U16",
            Self::U32 => "LenType::U32",
        }
    }
}

/// A resolved field type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ty {
    /// Unsigned integer of `width` bytes.
    Int {
        /// 1, 2, 4 or 8.
        width: u8,
        /// Inclusive minimum.
        min: u64,
        /// Inclusive maximum.
        max: u64,
        /// Zero is rejected with `ZeroValue`.
        nonzero: bool,
        /// Fixed value (not stored in the Rust type).
        konst: Option<u64>,
    },
    /// One byte 0/1.
    Bool,
    /// Length-prefixed UTF-8 (or printable ASCII).
    Str {
        /// Printable ASCII only.
        ascii: bool,
        /// Prefix width.
        len: LenType,
        /// Minimum byte length.
        min: u64,
        /// Maximum byte length.
        max: u64,
    },
    /// Length-prefixed opaque bytes.
    Bytes {
        /// Prefix width.
        len: LenType,
        /// Minimum length.
        min: u64,
        /// Maximum length.
        max: u64,
    },
    /// Exactly `size` bytes.
    Fixed {
        /// Size in bytes.
        size: u64,
        /// All-zero is rejected.
        nonzero: bool,
    },
    /// Counted sequence.
    Vector {
        /// Count prefix width.
        count: LenType,
        /// Minimum count.
        min: u64,
        /// Maximum count.
        max: u64,
        /// Item type.
        item: Box<Ty>,
    },
    /// A named struct, optionally length-delimited.
    Struct {
        /// Type name.
        name: String,
        /// Length prefix and maximum length when delimited.
        delimited: Option<(LenType, u64)>,
    },
    /// A named enum.
    Enum {
        /// Type name.
        name: String,
    },
    /// A named tagged union.
    Union {
        /// Type name.
        name: String,
    },
    /// An inline durable format, length-prefixed.
    Durable {
        /// Durable format name (schema name).
        format: String,
        /// Prefix width.
        len: LenType,
    },
}

/// `when` condition value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WhenValue {
    /// Sibling enum equals this value name.
    Enum {
        /// Enum type name.
        ty: String,
        /// Value name.
        value: String,
    },
    /// Sibling bool equals this.
    Bool(bool),
}

/// A field presence condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct When {
    /// Sibling field name.
    pub field: String,
    /// Value that makes the field present.
    pub equals: WhenValue,
}

/// A struct / body field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// Schema (camelCase) name.
    pub name: String,
    /// Resolved type.
    pub ty: Ty,
    /// Presence condition.
    pub when: Option<When>,
    /// Description, if any.
    pub description: Option<String>,
}

/// A semantic constraint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Constraint {
    /// The listed integer fields are not all zero.
    NotAllZero {
        /// Fields.
        fields: Vec<String>,
        /// Message.
        description: String,
    },
    /// Two RouteFence fields name the same object.
    SameObject {
        /// The two fields.
        fields: [String; 2],
        /// Message.
        description: String,
    },
    /// A RouteFence field names the given object kind.
    ObjectKind {
        /// Field.
        field: String,
        /// ObjectKind value name.
        equals: String,
        /// Message.
        description: String,
    },
    /// The record's leg is implied by an enum field.
    LegFromField {
        /// Enum field.
        field: String,
        /// Enum type name.
        ty: String,
        /// Enum value name → leg name.
        map: Vec<(String, String)>,
        /// Message.
        description: String,
    },
}

/// A named struct (also used for union cases, command bodies and durable formats).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StructDef {
    /// Rust type name.
    pub name: String,
    /// Fields in wire order.
    pub fields: Vec<Field>,
    /// Constraints.
    pub constraints: Vec<Constraint>,
    /// Description.
    pub description: Option<String>,
}

/// Enum value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnumValue {
    /// camelCase name.
    pub name: String,
    /// Wire value.
    pub value: u64,
    /// Description.
    pub description: Option<String>,
}

/// A named enum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnumDef {
    /// Rust type name.
    pub name: String,
    /// Encoding width (1 or 2).
    pub width: u8,
    /// Values.
    pub values: Vec<EnumValue>,
    /// Description.
    pub description: Option<String>,
}

/// A union case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnionCase {
    /// camelCase name.
    pub name: String,
    /// Tag byte.
    pub tag: u64,
    /// Case struct (None for an empty case).
    pub body: Option<StructDef>,
}

/// A named tagged union.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnionDef {
    /// Rust type name.
    pub name: String,
    /// Tag width.
    pub tag: LenType,
    /// Body length prefix.
    pub len: LenType,
    /// Cases.
    pub cases: Vec<UnionCase>,
    /// Description.
    pub description: Option<String>,
}

/// Command metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandDef {
    /// Command ID.
    pub id: u8,
    /// camelCase name.
    pub name: String,
    /// `infrastructure` or `application`.
    pub layer: String,
    /// `none`, `required` or `optional`.
    pub payload: String,
    /// Allowed flag bits.
    pub flags: u8,
    /// Allowed on RouteMesh.
    pub route_mesh: bool,
    /// Allowed on ClientServer.
    pub client_server: bool,
    /// Allowed legs.
    pub legs: Vec<String>,
    /// Reply commands of a request.
    pub replies: Vec<String>,
    /// Requests a reply-leg command answers.
    pub in_reply_to: Vec<String>,
    /// Field-paired answer (liveness).
    pub paired_by: Option<(String, String)>,
    /// Charged to the connection's flow-control credit (schema `flowCharged`, default false):
    /// the receiver checks the record carries exactly the charge its size implies.
    pub flow_charged: bool,
    /// Where the record's sending node identity comes from (schema `source`): `body` (the
    /// body's `source` NodeFence field), `connection` (the connection's admitted peer) or
    /// `none`. Default: `body` when the body has a `source` NodeFence field, else `none`.
    pub source: String,
    /// Body.
    pub body: StructDef,
}

/// Durable format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DurableDef {
    /// Schema name (`relocation-root-pointer`).
    pub name: String,
    /// 4 magic bytes.
    pub magic: [u8; 4],
    /// Version byte.
    pub version: u8,
    /// CRC-32C trailer present.
    pub crc_trailer: bool,
    /// Maximum total size.
    pub max_bytes: Option<u64>,
    /// Fields (struct name = Rust name).
    pub body: StructDef,
}

/// Flag declaration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlagDef {
    /// camelCase name.
    pub name: String,
    /// Bit value.
    pub bit: u8,
    /// Tail struct type, if the flag announces a tail.
    pub tail: Option<String>,
    /// Description.
    pub description: Option<String>,
}

/// The whole validated schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Model {
    /// Wire major.
    pub wire_major: u8,
    /// Required capability.
    pub capability: String,
    /// Limits by name.
    pub limits: BTreeMap<String, u64>,
    /// Flags.
    pub flags: Vec<FlagDef>,
    /// Reserved ID ranges with former names.
    pub reserved: Vec<(u8, u8, Option<String>)>,
    /// Structs, in declaration order.
    pub structs: Vec<StructDef>,
    /// Enums.
    pub enums: Vec<EnumDef>,
    /// Unions.
    pub unions: Vec<UnionDef>,
    /// Commands by ID.
    pub commands: Vec<CommandDef>,
    /// Durable formats.
    pub durables: Vec<DurableDef>,
}

struct Ctx {
    errors: Vec<SchemaError>,
    limits: BTreeMap<String, u64>,
    /// name → raw type JSON
    types: BTreeMap<String, Value>,
    durable_names: BTreeSet<String>,
}

impl Ctx {
    fn err(&mut self, path: &str, message: impl Into<String>) {
        self.errors.push(SchemaError {
            path: path.to_owned(),
            message: message.into(),
        });
    }

    fn obj<'v>(&mut self, v: &'v Value, path: &str) -> Option<&'v Map<String, Value>> {
        let o = v.as_object();
        if o.is_none() {
            self.err(path, "expected an object");
        }
        o
    }

    fn allow_keys(&mut self, o: &Map<String, Value>, path: &str, allowed: &[&str]) {
        for k in o.keys() {
            if !allowed.contains(&k.as_str()) {
                self.err(path, format!("unknown key `{k}`"));
            }
        }
    }

    fn str_of(&mut self, o: &Map<String, Value>, key: &str, path: &str) -> Option<String> {
        match o.get(key) {
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => {
                self.err(path, format!("`{key}` must be a string"));
                None
            }
            None => {
                self.err(path, format!("missing `{key}`"));
                None
            }
        }
    }

    fn u64_of(&mut self, o: &Map<String, Value>, key: &str, path: &str) -> Option<u64> {
        match o.get(key) {
            Some(v) => match v.as_u64() {
                Some(n) => Some(n),
                None => {
                    self.err(path, format!("`{key}` must be a non-negative integer"));
                    None
                }
            },
            None => None,
        }
    }

    fn description(o: &Map<String, Value>) -> Option<String> {
        o.get("description")
            .and_then(Value::as_str)
            .map(str::to_owned)
    }

    fn bound(&mut self, o: &Map<String, Value>, explicit: &str, path: &str) -> Option<u64> {
        let explicit_v = self.u64_of(o, explicit, path);
        let bound = match o.get("$bound") {
            Some(Value::String(name)) => match self.limits.get(name) {
                Some(v) => Some(*v),
                None => {
                    self.err(path, format!("`$bound` names unknown limit `{name}`"));
                    None
                }
            },
            Some(_) => {
                self.err(path, "`$bound` must be a limit name");
                None
            }
            None => None,
        };
        if explicit_v.is_some() && bound.is_some() {
            self.err(path, format!("both `{explicit}` and `$bound` given"));
        }
        explicit_v.or(bound)
    }

    fn len_type(&mut self, o: &Map<String, Value>, key: &str, path: &str) -> Option<LenType> {
        let s = self.str_of(o, key, path)?;
        let lt = LenType::parse(&s);
        if lt.is_none() {
            self.err(path, format!("`{key}` must be u8, u16 or u32, not `{s}`"));
        }
        lt
    }

    /// Resolve a field type spec (object with `type` or `$ref` or `durable`).
    fn ty(&mut self, o: &Map<String, Value>, path: &str, depth: usize) -> Option<Ty> {
        if depth > 8 {
            self.err(path, "type nesting too deep");
            return None;
        }
        let kinds = ["type", "$ref", "durable"]
            .iter()
            .filter(|k| o.contains_key(**k))
            .count();
        if kinds != 1 {
            self.err(path, "exactly one of `type`, `$ref`, `durable` is required");
            return None;
        }
        if let Some(Value::String(name)) = o.get("durable") {
            if !self.durable_names.contains(name) {
                self.err(path, format!("unknown durable format `{name}`"));
                return None;
            }
            let len = self.len_type(o, "lengthType", path)?;
            return Some(Ty::Durable {
                format: name.clone(),
                len,
            });
        }
        if let Some(r) = o.get("$ref") {
            let Some(name) = r.as_str() else {
                self.err(path, "`$ref` must be a type name");
                return None;
            };
            let Some(def) = self.types.get(name).cloned() else {
                self.err(path, format!("`$ref` to undefined type `{name}`"));
                return None;
            };
            let kind = def.get("kind").and_then(Value::as_str).unwrap_or("");
            return match kind {
                "scalar" => {
                    let def_o = def.as_object()?.clone();
                    self.ty_primitive(&def_o, &format!("types.{name}"), depth + 1)
                }
                "enum" => Some(Ty::Enum {
                    name: name.to_owned(),
                }),
                "union" => Some(Ty::Union {
                    name: name.to_owned(),
                }),
                "struct" => {
                    let delimited = if o.contains_key("lengthType") {
                        let lt = self.len_type(o, "lengthType", path)?;
                        let max = self.bound(o, "maxBytes", path).unwrap_or(lt.max());
                        if max > lt.max() {
                            self.err(path, "maximum exceeds the length prefix range");
                        }
                        Some((lt, max))
                    } else {
                        None
                    };
                    Some(Ty::Struct {
                        name: name.to_owned(),
                        delimited,
                    })
                }
                other => {
                    self.err(path, format!("type `{name}` has unknown kind `{other}`"));
                    None
                }
            };
        }
        self.ty_primitive(o, path, depth)
    }

    fn ty_primitive(&mut self, o: &Map<String, Value>, path: &str, depth: usize) -> Option<Ty> {
        let t = self.str_of(o, "type", path)?;
        let int = |width: u8| -> u64 {
            match width {
                1 => u64::from(u8::MAX),
                2 => u64::from(u16::MAX),
                4 => u64::from(u32::MAX),
                _ => u64::MAX,
            }
        };
        match t.as_str() {
            "u8" | "u16" | "u32" | "u64" | "nonzero-u64" => {
                let width = match t.as_str() {
                    "u8" => 1,
                    "u16" => 2,
                    "u32" => 4,
                    _ => 8,
                };
                let nonzero = t == "nonzero-u64";
                let min = self.u64_of(o, "min", path).unwrap_or(u64::from(nonzero));
                let max = self.bound(o, "max", path).unwrap_or(int(width));
                let konst = self.u64_of(o, "const", path);
                if min > max || max > int(width) {
                    self.err(path, format!("bad integer bounds {min}..={max} for {t}"));
                }
                if let Some(c) = konst
                    && (c < min || c > max)
                {
                    self.err(path, "const outside bounds");
                }
                Some(Ty::Int {
                    width,
                    min,
                    max,
                    nonzero,
                    konst,
                })
            }
            "bool" => Some(Ty::Bool),
            "string" | "ascii" | "bytes" => {
                let len = self.len_type(o, "lengthType", path)?;
                let min = self.u64_of(o, "minBytes", path).unwrap_or(0);
                let max = self.bound(o, "maxBytes", path).unwrap_or(len.max());
                if min > max || max > len.max() {
                    self.err(path, format!("bad length bounds {min}..={max} for {len:?}"));
                }
                Some(if t == "bytes" {
                    Ty::Bytes { len, min, max }
                } else {
                    Ty::Str {
                        ascii: t == "ascii",
                        len,
                        min,
                        max,
                    }
                })
            }
            "fixed" => {
                let size = self.u64_of(o, "size", path);
                let nonzero = o.get("nonZero").and_then(Value::as_bool).unwrap_or(false);
                match size {
                    Some(size) if (1..=64).contains(&size) => Some(Ty::Fixed { size, nonzero }),
                    _ => {
                        self.err(path, "fixed needs `size` 1..=64");
                        None
                    }
                }
            }
            "vector" => {
                let count = self.len_type(o, "countType", path)?;
                let min = self.u64_of(o, "minCount", path).unwrap_or(0);
                let max = self.bound(o, "maxCount", path).unwrap_or(count.max());
                if min > max || max > count.max() {
                    self.err(path, format!("bad count bounds {min}..={max}"));
                }
                let Some(item) = o.get("item").and_then(Value::as_object) else {
                    self.err(path, "vector needs an `item` object");
                    return None;
                };
                let item = self.ty(item, &format!("{path}.item"), depth + 1)?;
                match &item {
                    Ty::Struct { .. } | Ty::Bytes { .. } | Ty::Enum { .. } => {}
                    _ => self.err(path, "vector items must be structs, enums or bytes"),
                }
                Some(Ty::Vector {
                    count,
                    min,
                    max,
                    item: Box::new(item),
                })
            }
            other => {
                self.err(path, format!("unknown type `{other}`"));
                None
            }
        }
    }

    fn fields(&mut self, v: Option<&Value>, path: &str) -> Vec<Field> {
        let Some(arr) = v.and_then(Value::as_array) else {
            self.err(path, "expected an array of fields");
            return Vec::new();
        };
        let mut out: Vec<Field> = Vec::new();
        for (i, f) in arr.iter().enumerate() {
            let fp = format!("{path}[{i}]");
            let Some(o) = self.obj(f, &fp) else { continue };
            self.allow_keys(
                o,
                &fp,
                &[
                    "name",
                    "type",
                    "$ref",
                    "durable",
                    "lengthType",
                    "minBytes",
                    "maxBytes",
                    "$bound",
                    "min",
                    "max",
                    "const",
                    "size",
                    "nonZero",
                    "countType",
                    "minCount",
                    "maxCount",
                    "item",
                    "when",
                    "description",
                ],
            );
            let Some(name) = self.str_of(o, "name", &fp) else {
                continue;
            };
            if !is_camel(&name) {
                self.err(&fp, format!("field name `{name}` is not camelCase"));
            }
            if out.iter().any(|x| x.name == name) {
                self.err(&fp, format!("duplicate field `{name}`"));
            }
            let Some(ty) = self.ty(o, &fp, 0) else {
                continue;
            };
            let when = match o.get("when") {
                None => None,
                Some(w) => self.when(w, &out, &fp),
            };
            out.push(Field {
                name,
                ty,
                when,
                description: Self::description(o),
            });
        }
        out
    }

    fn when(&mut self, w: &Value, earlier: &[Field], path: &str) -> Option<When> {
        let o = self.obj(w, path)?;
        let field = self.str_of(o, "field", path)?;
        let Some(sib) = earlier.iter().find(|f| f.name == field) else {
            self.err(
                path,
                format!("`when` refers to `{field}`, which is not an earlier sibling"),
            );
            return None;
        };
        if sib.when.is_some() {
            self.err(path, "`when` may not depend on a conditional field");
        }
        let equals = match (&sib.ty, o.get("equals")) {
            (Ty::Bool, Some(Value::Bool(b))) => WhenValue::Bool(*b),
            (Ty::Enum { name }, Some(Value::String(v))) => {
                let known = self
                    .types
                    .get(name)
                    .and_then(|t| t.get("values"))
                    .and_then(Value::as_array)
                    .is_some_and(|vals| {
                        vals.iter()
                            .any(|x| x.get("name").and_then(Value::as_str) == Some(v.as_str()))
                    });
                if !known {
                    self.err(path, format!("`when` value `{v}` is not a value of {name}"));
                }
                WhenValue::Enum {
                    ty: name.clone(),
                    value: v.clone(),
                }
            }
            _ => {
                self.err(
                    path,
                    "`when` needs an enum field with a value name or a bool field with true/false",
                );
                return None;
            }
        };
        Some(When { field, equals })
    }

    fn constraints(&mut self, v: Option<&Value>, fields: &[Field], path: &str) -> Vec<Constraint> {
        let Some(v) = v else { return Vec::new() };
        let Some(arr) = v.as_array() else {
            self.err(path, "constraints must be an array");
            return Vec::new();
        };
        let mut out = Vec::new();
        for (i, c) in arr.iter().enumerate() {
            let cp = format!("{path}[{i}]");
            let Some(o) = self.obj(c, &cp) else { continue };
            self.allow_keys(
                o,
                &cp,
                &["kind", "fields", "field", "equals", "map", "description"],
            );
            let Some(kind) = self.str_of(o, "kind", &cp) else {
                continue;
            };
            let description = Self::description(o).unwrap_or_else(|| kind.clone());
            let field_ty =
                |name: &str| fields.iter().find(|f| f.name == name).map(|f| f.ty.clone());
            let names: Vec<String> = o
                .get("fields")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            match kind.as_str() {
                "notAllZero" => {
                    if names.is_empty()
                        || names
                            .iter()
                            .any(|n| !matches!(field_ty(n), Some(Ty::Int { .. })))
                    {
                        self.err(&cp, "notAllZero needs integer fields");
                        continue;
                    }
                    out.push(Constraint::NotAllZero {
                        fields: names,
                        description,
                    });
                }
                "sameObject" => {
                    let ok = names.len() == 2
                        && names.iter().all(|n| {
                            matches!(field_ty(n), Some(Ty::Struct { name, .. }) if name == "RouteFence")
                        });
                    if !ok {
                        self.err(&cp, "sameObject needs two RouteFence fields");
                        continue;
                    }
                    out.push(Constraint::SameObject {
                        fields: [names[0].clone(), names[1].clone()],
                        description,
                    });
                }
                "objectKind" => {
                    let field = self.str_of(o, "field", &cp).unwrap_or_default();
                    let equals = self.str_of(o, "equals", &cp).unwrap_or_default();
                    let ok = matches!(field_ty(&field), Some(Ty::Struct { name, .. }) if name == "RouteFence")
                        && (equals == "actor" || equals == "spot");
                    if !ok {
                        self.err(&cp, "objectKind needs a RouteFence field and actor|spot");
                        continue;
                    }
                    out.push(Constraint::ObjectKind {
                        field,
                        equals,
                        description,
                    });
                }
                "legFromField" => {
                    let field = self.str_of(o, "field", &cp).unwrap_or_default();
                    let Some(Ty::Enum { name: ty }) = field_ty(&field) else {
                        self.err(&cp, "legFromField needs an enum field");
                        continue;
                    };
                    let mut map = Vec::new();
                    if let Some(m) = o.get("map").and_then(Value::as_object) {
                        for (k, v) in m {
                            let leg = v.as_str().unwrap_or("");
                            if !["send", "request", "reply"].contains(&leg) {
                                self.err(&cp, format!("unknown leg `{leg}`"));
                            }
                            map.push((k.clone(), leg.to_owned()));
                        }
                    }
                    out.push(Constraint::LegFromField {
                        field,
                        ty,
                        map,
                        description,
                    });
                }
                other => self.err(&cp, format!("unknown constraint kind `{other}`")),
            }
        }
        out
    }
}

fn is_camel(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase()) && chars.all(|c| c.is_ascii_alphanumeric())
}

fn is_pascal(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_uppercase()) && chars.all(|c| c.is_ascii_alphanumeric())
}

/// `helloWorld` → `HelloWorld`.
pub fn pascal(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut upper = true;
    for c in s.chars() {
        if c == '-' || c == '_' {
            upper = true;
            continue;
        }
        if upper {
            out.push(c.to_ascii_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// `helloWorld` → `hello_world`; `applicationPayloadAbsoluteBytes` → `application_payload_absolute_bytes`.
pub fn snake(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 4);
    for (i, c) in s.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else if c == '-' {
            out.push('_');
        } else {
            out.push(c);
        }
    }
    out
}

fn hex4(s: &str) -> Option<[u8; 4]> {
    if s.len() != 8 {
        return None;
    }
    let mut out = [0u8; 4];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(s.get(i * 2..i * 2 + 2)?, 16).ok()?;
    }
    Some(out)
}

impl Model {
    /// Parse and validate a schema document. Returns every problem found.
    ///
    /// # Errors
    /// The list of schema errors when the schema is invalid.
    pub fn from_json(text: &str) -> Result<Model, Vec<SchemaError>> {
        let root: Value = serde_json::from_str(text).map_err(|e| {
            vec![SchemaError {
                path: "$".into(),
                message: format!("invalid JSON: {e}"),
            }]
        })?;
        let mut cx = Ctx {
            errors: Vec::new(),
            limits: BTreeMap::new(),
            types: BTreeMap::new(),
            durable_names: BTreeSet::new(),
        };
        let Some(o) = cx.obj(&root, "$").cloned() else {
            return Err(cx.errors);
        };
        cx.allow_keys(
            &o,
            "$",
            &[
                "schema",
                "title",
                "description",
                "conventions",
                "wireMajor",
                "requiredCapability",
                "magic",
                "limits",
                "flags",
                "tailEncoding",
                "frames",
                "topologies",
                "legs",
                "reservedCommandIds",
                "types",
                "commands",
                "durableFormats",
            ],
        );
        if o.get("schema").and_then(Value::as_str) != Some("zlink-service-wire") {
            cx.err("$.schema", "must be \"zlink-service-wire\"");
        }
        let wire_major = cx.u64_of(&o, "wireMajor", "$").unwrap_or(0);
        if wire_major != 1 {
            cx.err("$.wireMajor", "wire major must be 1");
        }
        let capability = cx.str_of(&o, "requiredCapability", "$").unwrap_or_default();
        if capability != "framework-service-v13" {
            cx.err("$.requiredCapability", "must be framework-service-v13");
        }
        if o.get("magic").and_then(Value::as_str) != Some("5a4d") {
            cx.err("$.magic", "frame magic must be 5a4d");
        }
        // Limits.
        match o.get("limits").and_then(Value::as_object) {
            Some(l) => {
                for (k, v) in l {
                    match v.as_u64() {
                        Some(n) => {
                            cx.limits.insert(k.clone(), n);
                        }
                        None => cx.err(&format!("limits.{k}"), "must be a non-negative integer"),
                    }
                }
            }
            None => cx.err("$.limits", "missing limits object"),
        }
        // Topologies and legs are fixed vocabularies.
        let names_of = |v: Option<&Value>| -> Vec<String> {
            v.and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x.get("name").and_then(Value::as_str).map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default()
        };
        if names_of(o.get("topologies")) != ["routeMesh", "clientServer"] {
            cx.err("$.topologies", "must declare routeMesh and clientServer");
        }
        if names_of(o.get("legs")) != ["send", "request", "reply"] {
            cx.err("$.legs", "must declare send, request and reply");
        }
        // Durable names first (fields may refer to them).
        let durable_raw: Vec<Value> = o
            .get("durableFormats")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for d in &durable_raw {
            if let Some(n) = d.get("name").and_then(Value::as_str)
                && !cx.durable_names.insert(n.to_owned())
            {
                cx.err(
                    "$.durableFormats",
                    format!("duplicate durable format `{n}`"),
                );
            }
        }
        // Types.
        let types_raw: Vec<Value> = o
            .get("types")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for (i, t) in types_raw.iter().enumerate() {
            let p = format!("types[{i}]");
            match t.get("name").and_then(Value::as_str) {
                Some(n) if is_pascal(n) => {
                    if cx.types.insert(n.to_owned(), t.clone()).is_some() {
                        cx.err(&p, format!("duplicate type `{n}`"));
                    }
                }
                _ => cx.err(&p, "type needs a PascalCase `name`"),
            }
        }
        let mut structs = Vec::new();
        let mut enums = Vec::new();
        let mut unions = Vec::new();
        for (i, t) in types_raw.iter().enumerate() {
            let p = format!("types[{i}]");
            let Some(to) = cx.obj(t, &p).cloned() else {
                continue;
            };
            let name = to
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            let p = format!("types.{name}");
            let description = Ctx::description(&to);
            match to.get("kind").and_then(Value::as_str) {
                Some("scalar") => {
                    cx.allow_keys(
                        &to,
                        &p,
                        &[
                            "name",
                            "kind",
                            "type",
                            "lengthType",
                            "minBytes",
                            "maxBytes",
                            "$bound",
                            "min",
                            "max",
                            "size",
                            "nonZero",
                            "description",
                        ],
                    );
                    let _ = cx.ty_primitive(&to, &p, 0);
                }
                Some("enum") => {
                    cx.allow_keys(
                        &to,
                        &p,
                        &["name", "kind", "encoding", "values", "description"],
                    );
                    let width = match to.get("encoding").and_then(Value::as_str) {
                        Some("u8") => 1u8,
                        Some("u16") => 2,
                        _ => {
                            cx.err(&p, "enum encoding must be u8 or u16");
                            1
                        }
                    };
                    let mut values: Vec<EnumValue> = Vec::new();
                    for (j, v) in to
                        .get("values")
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default()
                        .iter()
                        .enumerate()
                    {
                        let vp = format!("{p}.values[{j}]");
                        let Some(vo) = cx.obj(v, &vp).cloned() else {
                            continue;
                        };
                        cx.allow_keys(&vo, &vp, &["name", "value", "description"]);
                        let vname = cx.str_of(&vo, "name", &vp).unwrap_or_default();
                        let Some(value) = cx.u64_of(&vo, "value", &vp) else {
                            cx.err(&vp, "missing `value`");
                            continue;
                        };
                        if !is_camel(&vname) {
                            cx.err(&vp, format!("enum value `{vname}` is not camelCase"));
                        }
                        if value > if width == 1 { 255 } else { 65535 } {
                            cx.err(&vp, "value does not fit the encoding");
                        }
                        if values.iter().any(|x| x.name == vname || x.value == value) {
                            cx.err(&vp, "duplicate enum name or value");
                        }
                        values.push(EnumValue {
                            name: vname,
                            value,
                            description: Ctx::description(&vo),
                        });
                    }
                    if values.is_empty() {
                        cx.err(&p, "enum has no values");
                    }
                    enums.push(EnumDef {
                        name,
                        width,
                        values,
                        description,
                    });
                }
                Some("struct") => {
                    cx.allow_keys(
                        &to,
                        &p,
                        &["name", "kind", "fields", "constraints", "description"],
                    );
                    let fields = cx.fields(to.get("fields"), &format!("{p}.fields"));
                    let constraints =
                        cx.constraints(to.get("constraints"), &fields, &format!("{p}.constraints"));
                    structs.push(StructDef {
                        name,
                        fields,
                        constraints,
                        description,
                    });
                }
                Some("union") => {
                    cx.allow_keys(
                        &to,
                        &p,
                        &[
                            "name",
                            "kind",
                            "tagType",
                            "lengthType",
                            "cases",
                            "description",
                        ],
                    );
                    let tag = cx.len_type(&to, "tagType", &p).unwrap_or(LenType::U8);
                    let len = cx.len_type(&to, "lengthType", &p).unwrap_or(LenType::U16);
                    if tag != LenType::U8 {
                        cx.err(&p, "union tagType must be u8");
                    }
                    let mut cases: Vec<UnionCase> = Vec::new();
                    for (j, c) in to
                        .get("cases")
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default()
                        .iter()
                        .enumerate()
                    {
                        let cp = format!("{p}.cases[{j}]");
                        let Some(co) = cx.obj(c, &cp).cloned() else {
                            continue;
                        };
                        cx.allow_keys(
                            &co,
                            &cp,
                            &["name", "tag", "fields", "constraints", "description"],
                        );
                        let cname = cx.str_of(&co, "name", &cp).unwrap_or_default();
                        let ctag = cx.u64_of(&co, "tag", &cp).unwrap_or(0);
                        if ctag > 255 || cases.iter().any(|x| x.tag == ctag || x.name == cname) {
                            cx.err(&cp, "duplicate or out-of-range union case");
                        }
                        let fields = cx.fields(co.get("fields"), &format!("{cp}.fields"));
                        let constraints = cx.constraints(
                            co.get("constraints"),
                            &fields,
                            &format!("{cp}.constraints"),
                        );
                        let body = if fields.is_empty() {
                            None
                        } else {
                            Some(StructDef {
                                name: format!("{name}{}", pascal(&cname)),
                                fields,
                                constraints,
                                description: Ctx::description(&co),
                            })
                        };
                        cases.push(UnionCase {
                            name: cname,
                            tag: ctag,
                            body,
                        });
                    }
                    if cases.is_empty() {
                        cx.err(&p, "union has no cases");
                    }
                    unions.push(UnionDef {
                        name,
                        tag,
                        len,
                        cases,
                        description,
                    });
                }
                other => cx.err(&p, format!("unknown type kind {other:?}")),
            }
        }
        // Flags.
        let mut flags: Vec<FlagDef> = Vec::new();
        for (i, f) in o
            .get("flags")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
            .iter()
            .enumerate()
        {
            let fp = format!("flags[{i}]");
            let Some(fo) = cx.obj(f, &fp).cloned() else {
                continue;
            };
            cx.allow_keys(&fo, &fp, &["name", "bit", "tail", "description"]);
            let name = cx.str_of(&fo, "name", &fp).unwrap_or_default();
            let bit = cx.u64_of(&fo, "bit", &fp).unwrap_or(0);
            if !matches!(bit, 1 | 2 | 4 | 8) || flags.iter().any(|x| u64::from(x.bit) == bit) {
                cx.err(&fp, "flag bit must be a unique one of 1, 2, 4, 8");
            }
            let tail = fo.get("tail").and_then(Value::as_str).map(str::to_owned);
            if let Some(t) = &tail
                && !structs.iter().any(|s| &s.name == t)
            {
                cx.err(&fp, format!("tail type `{t}` is not a struct"));
            }
            flags.push(FlagDef {
                name,
                bit: bit as u8,
                tail,
                description: Ctx::description(&fo),
            });
        }
        let expected_flags = ["metadata", "boundSession", "sourceSpotId", "extension"];
        if flags.iter().map(|f| f.name.as_str()).collect::<Vec<_>>() != expected_flags {
            cx.err(
                "$.flags",
                "flags must be metadata, boundSession, sourceSpotId, extension in bit order",
            );
        }
        // Reserved IDs.
        let mut reserved = Vec::new();
        for (i, r) in o
            .get("reservedCommandIds")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
            .iter()
            .enumerate()
        {
            let rp = format!("reservedCommandIds[{i}]");
            let Some(ro) = cx.obj(r, &rp).cloned() else {
                continue;
            };
            cx.allow_keys(&ro, &rp, &["from", "to", "formerName", "description"]);
            let from = cx.u64_of(&ro, "from", &rp).unwrap_or(0);
            let to = cx.u64_of(&ro, "to", &rp).unwrap_or(0);
            if from == 0 || from > to || to > 255 {
                cx.err(&rp, "bad reserved range");
                continue;
            }
            reserved.push((
                from as u8,
                to as u8,
                ro.get("formerName")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            ));
        }
        // Commands.
        let mut commands: Vec<CommandDef> = Vec::new();
        let raw_commands = o
            .get("commands")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for (i, c) in raw_commands.iter().enumerate() {
            let cp = format!("commands[{i}]");
            let Some(co) = cx.obj(c, &cp).cloned() else {
                continue;
            };
            cx.allow_keys(
                &co,
                &cp,
                &[
                    "id",
                    "name",
                    "layer",
                    "payload",
                    "flags",
                    "topologies",
                    "legs",
                    "replies",
                    "inReplyTo",
                    "pairedBy",
                    "flowCharged",
                    "source",
                    "description",
                    "body",
                    "constraints",
                ],
            );
            let id = cx.u64_of(&co, "id", &cp).unwrap_or(0);
            let name = cx.str_of(&co, "name", &cp).unwrap_or_default();
            let cp = format!("commands.{name}");
            if !(1..=255).contains(&id) {
                cx.err(&cp, "command id must be 1..=255");
            }
            if commands.iter().any(|x| u64::from(x.id) == id) {
                cx.err(&cp, format!("duplicate command id {id}"));
            }
            if commands.iter().any(|x| x.name == name) || !is_camel(&name) {
                cx.err(&cp, "duplicate or non-camelCase command name");
            }
            let layer = cx.str_of(&co, "layer", &cp).unwrap_or_default();
            if layer != "infrastructure" && layer != "application" {
                cx.err(&cp, "layer must be infrastructure or application");
            }
            let payload = cx.str_of(&co, "payload", &cp).unwrap_or_default();
            if !["none", "required", "optional"].contains(&payload.as_str()) {
                cx.err(&cp, "payload must be none, required or optional");
            }
            let strs = |v: Option<&Value>| -> Option<Vec<String>> {
                v.and_then(Value::as_array).map(|a| {
                    a.iter()
                        .filter_map(|x| x.as_str().map(str::to_owned))
                        .collect()
                })
            };
            let mut flag_bits = 0u8;
            for f in strs(co.get("flags")).unwrap_or_default() {
                match flags.iter().find(|x| x.name == f) {
                    Some(fd) => flag_bits |= fd.bit,
                    None => cx.err(&cp, format!("unknown flag `{f}`")),
                }
            }
            let topologies = strs(co.get("topologies")).unwrap_or_default();
            for t in &topologies {
                if t != "routeMesh" && t != "clientServer" {
                    cx.err(&cp, format!("unknown topology `{t}`"));
                }
            }
            let route_mesh = topologies.iter().any(|t| t == "routeMesh");
            let client_server = topologies.iter().any(|t| t == "clientServer");
            if client_server && !(1..=6).contains(&id) {
                cx.err(
                    &cp,
                    "only commands 1..6 may appear on clientServer (wire §4)",
                );
            }
            if !route_mesh {
                cx.err(&cp, "every command is allowed on routeMesh");
            }
            let legs = strs(co.get("legs")).unwrap_or_default();
            if legs.is_empty() {
                cx.err(&cp, "command needs at least one leg");
            }
            for l in &legs {
                if !["send", "request", "reply"].contains(&l.as_str()) {
                    cx.err(&cp, format!("unknown leg `{l}`"));
                }
            }
            let replies = strs(co.get("replies")).unwrap_or_default();
            let in_reply_to = strs(co.get("inReplyTo")).unwrap_or_default();
            if legs.iter().any(|l| l == "request") == replies.is_empty() {
                cx.err(
                    &cp,
                    "a command has `replies` exactly when it may travel on the request leg",
                );
            }
            if legs.iter().any(|l| l == "reply") == in_reply_to.is_empty() {
                cx.err(
                    &cp,
                    "a command has `inReplyTo` exactly when it travels on the reply leg",
                );
            }
            let paired_by = co.get("pairedBy").and_then(Value::as_object).map(|p| {
                (
                    p.get("field")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned(),
                    p.get("answer")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned(),
                )
            });
            let fields = cx.fields(co.get("body"), &format!("{cp}.body"));
            if fields.is_empty() {
                cx.err(&cp, "command lacks a body layout (no fields)");
            }
            let constraints =
                cx.constraints(co.get("constraints"), &fields, &format!("{cp}.constraints"));
            if let Some((f, _)) = &paired_by
                && !fields.iter().any(|x| &x.name == f)
            {
                cx.err(&cp, format!("pairedBy field `{f}` is not a body field"));
            }
            let has_source_field = fields.iter().any(|x| {
                x.name == "source"
                    && matches!(&x.ty, Ty::Struct { name, .. } if name == "NodeFence")
            });
            let flow_charged = match co.get("flowCharged") {
                None => false,
                Some(Value::Bool(b)) => *b,
                Some(_) => {
                    cx.err(&cp, "flowCharged must be a boolean");
                    false
                }
            };
            let source = match co.get("source") {
                None if has_source_field => "body".to_owned(),
                None => "none".to_owned(),
                Some(v) => v.as_str().unwrap_or("").to_owned(),
            };
            if !["body", "connection", "none"].contains(&source.as_str()) {
                cx.err(&cp, "source must be body, connection or none");
            }
            if source == "body" && !has_source_field {
                cx.err(
                    &cp,
                    "source `body` needs a `source` field of type NodeFence",
                );
            }
            if source != "body" && has_source_field {
                cx.err(
                    &cp,
                    "a body with a `source` NodeFence field names its sender by it (source `body`)",
                );
            }
            if flow_charged && source == "none" {
                cx.err(
                    &cp,
                    "a flow-charged command needs a sender identity (source `body` or `connection`)",
                );
            }
            let multi_leg = legs.len() > 1;
            let has_leg_constraint = constraints
                .iter()
                .any(|c| matches!(c, Constraint::LegFromField { .. }));
            if multi_leg != has_leg_constraint {
                cx.err(&cp, "a command allowed on several legs needs a legFromField constraint (and only then)");
            }
            commands.push(CommandDef {
                id: id.min(255) as u8,
                name: name.clone(),
                layer,
                payload,
                flags: flag_bits,
                route_mesh,
                client_server,
                legs,
                replies,
                in_reply_to,
                paired_by,
                flow_charged,
                source,
                body: StructDef {
                    name: pascal(&name),
                    fields,
                    constraints,
                    description: Ctx::description(&co),
                },
            });
        }
        // Cross-command checks: pairing consistency, ID space coverage.
        for c in &commands {
            for r in &c.replies {
                match commands.iter().find(|x| &x.name == r) {
                    Some(rc) if rc.in_reply_to.contains(&c.name) => {}
                    Some(_) => cx.err(
                        &format!("commands.{}", c.name),
                        format!("reply `{r}` does not list `{}` in inReplyTo", c.name),
                    ),
                    None => cx.err(
                        &format!("commands.{}", c.name),
                        format!("unknown reply `{r}`"),
                    ),
                }
            }
            for r in &c.in_reply_to {
                match commands.iter().find(|x| &x.name == r) {
                    Some(rc) if rc.replies.contains(&c.name) => {}
                    _ => cx.err(
                        &format!("commands.{}", c.name),
                        format!("inReplyTo `{r}` is not a request answered by `{}`", c.name),
                    ),
                }
            }
            if let Some((_, answer)) = &c.paired_by
                && !commands.iter().any(|x| &x.name == answer)
            {
                cx.err(
                    &format!("commands.{}", c.name),
                    format!("unknown pairedBy answer `{answer}`"),
                );
            }
        }
        for id in 1..=255u8 {
            let defined = commands.iter().filter(|c| c.id == id).count();
            let res = reserved
                .iter()
                .filter(|(a, b, _)| (*a..=*b).contains(&id))
                .count();
            if defined + res != 1 {
                cx.err(
                    "$.commands",
                    format!("command id {id} must be exactly one of defined or reserved (defined {defined}, reserved {res})"),
                );
            }
        }
        commands.sort_by_key(|c| c.id);
        // Durable formats.
        let mut durables = Vec::new();
        for (i, d) in durable_raw.iter().enumerate() {
            let dp = format!("durableFormats[{i}]");
            let Some(dobj) = cx.obj(d, &dp).cloned() else {
                continue;
            };
            cx.allow_keys(
                &dobj,
                &dp,
                &[
                    "name",
                    "rustName",
                    "magic",
                    "version",
                    "checksum",
                    "$bound",
                    "description",
                    "fields",
                ],
            );
            let name = cx.str_of(&dobj, "name", &dp).unwrap_or_default();
            let rust_name = cx.str_of(&dobj, "rustName", &dp).unwrap_or_default();
            if !is_pascal(&rust_name) {
                cx.err(&dp, "rustName must be PascalCase");
            }
            let magic = dobj.get("magic").and_then(Value::as_str).and_then(hex4);
            if magic.is_none() {
                cx.err(&dp, "magic must be 4 bytes of hex");
            }
            let version = cx.u64_of(&dobj, "version", &dp).unwrap_or(0);
            if !(1..=255).contains(&version) {
                cx.err(&dp, "version must be 1..=255");
            }
            let crc_trailer = match dobj.get("checksum").and_then(Value::as_str) {
                Some("crc32c-trailer") => true,
                Some("none") => false,
                _ => {
                    cx.err(&dp, "checksum must be crc32c-trailer or none");
                    false
                }
            };
            let max_bytes = cx.bound(&dobj, "maxBytes", &dp);
            let fields = cx.fields(dobj.get("fields"), &format!("{dp}.fields"));
            if fields.is_empty() {
                cx.err(&dp, "durable format lacks a layout (no fields)");
            }
            durables.push(DurableDef {
                name,
                magic: magic.unwrap_or_default(),
                version: version.min(255) as u8,
                crc_trailer,
                max_bytes,
                body: StructDef {
                    name: rust_name,
                    fields,
                    constraints: Vec::new(),
                    description: Ctx::description(&dobj),
                },
            });
        }
        let magics: BTreeSet<[u8; 4]> = durables.iter().map(|d| d.magic).collect();
        if magics.len() != durables.len() {
            cx.err("$.durableFormats", "durable magics must be unique");
        }
        if cx.errors.is_empty() {
            Ok(Model {
                wire_major: wire_major as u8,
                capability,
                limits: cx.limits,
                flags,
                reserved,
                structs,
                enums,
                unions,
                commands,
                durables,
            })
        } else {
            Err(cx.errors)
        }
    }

    /// Look up an enum.
    pub fn enum_def(&self, name: &str) -> Option<&EnumDef> {
        self.enums.iter().find(|e| e.name == name)
    }

    /// Look up a struct (named types only).
    pub fn struct_def(&self, name: &str) -> Option<&StructDef> {
        self.structs.iter().find(|s| s.name == name)
    }

    /// Look up a union.
    pub fn union_def(&self, name: &str) -> Option<&UnionDef> {
        self.unions.iter().find(|u| u.name == name)
    }

    /// Look up a durable format by schema name.
    pub fn durable_def(&self, name: &str) -> Option<&DurableDef> {
        self.durables.iter().find(|d| d.name == name)
    }

    /// Minimum encoded size of a type, used for count-vs-remaining checks before allocation.
    pub fn min_size(&self, ty: &Ty) -> u64 {
        match ty {
            Ty::Int { width, .. } => u64::from(*width),
            Ty::Bool => 1,
            Ty::Str { len, min, .. } | Ty::Bytes { len, min, .. } => len.size() + min,
            Ty::Fixed { size, .. } => *size,
            Ty::Vector {
                count, min, item, ..
            } => count.size() + min * self.min_size(item),
            Ty::Struct { name, delimited } => match delimited {
                Some((lt, _)) => lt.size(),
                None => self
                    .struct_def(name)
                    .map(|s| self.struct_min_size(s))
                    .unwrap_or(0),
            },
            Ty::Enum { name } => self.enum_def(name).map(|e| u64::from(e.width)).unwrap_or(1),
            Ty::Union { name } => self
                .union_def(name)
                .map(|u| u.tag.size() + u.len.size())
                .unwrap_or(3),
            Ty::Durable { len, .. } => len.size(),
        }
    }

    /// Minimum encoded size of a struct.
    pub fn struct_min_size(&self, s: &StructDef) -> u64 {
        s.fields
            .iter()
            .filter(|f| f.when.is_none())
            .map(|f| self.min_size(&f.ty))
            .sum()
    }
}
