/* graphir._girtext: the `.gir` text format's two hot loops, compiled.
 *
 * The reader (Reader, make_reader) is the parser's plain-line loop for the commonest node lines;
 * the writer (Writer, make_writer) is the printer's node_line for the commonest nodes. Each does
 * a strict subset of what its Python original does and hands everything else back to it, so the
 * parsed graph and the printed bytes are the same with or without this module (it is optional:
 * setup.py builds it when a C compiler is there); tests/unit/test_girtext_reader.py and
 * test_girtext_writer.py run both ways and compare.
 *
 * The reader. graphir/parser.py (_Parser._read_plain_lines) reads canonical node lines with
 * regular expressions and builds each node as it goes. The reader does the same for
 *
 *     <spaces>%name = dialect.Op(%a, %b) ctrl(@c) : (T, T) -> T [cost = <decimal><unit>, mem = {...}]
 *
 * with one result, no `@name`, no params, ASCII only, every operand already defined with the type
 * the line declares, and annotations of `cost` (a plain decimal of at most 28 characters) and/or
 * `mem` only, without any regular expression or Python-level call per node. The first line
 * outside that subset ends the call unread, and the Python loop reads it (and reports whatever is
 * wrong with it), then calls here again. So for every line it accepts it must do exactly what the
 * Python loop does: the same checks in the same order, the same objects with the same fields, the
 * same calls of the type reader on a cache miss.
 *
 * Objects are read and built as the Python code does it (object.__new__ and a store per slot, no
 * __init__): the slots' offsets are read from the classes' member descriptors when a reader or a
 * writer is made, which is refused (None: the Python code does everything) unless every class has
 * exactly the slots this file knows.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

/* Slots of graphir.ir.Node, graphir.ir.Value, graphir.annotations.Cost and Mem, in this order. */
static const char *NODE_SLOTS[] = {"op", "name", "inputs", "outputs", "params", "_annotations", "graph",
                                   "_seq", "_index_pos", "_loc", "_line", "control_inputs", "control_users"};
enum { N_OP, N_NAME, N_INPUTS, N_OUTPUTS, N_PARAMS, N_ANNOTATIONS, N_GRAPH, N_SEQ, N_INDEX_POS, N_LOC, N_LINE,
       N_CONTROL_INPUTS, N_CONTROL_USERS, N_COUNT };
static const char *VALUE_SLOTS[] = {"name", "type", "kind", "producer", "output_index", "uses", "const", "graph"};
enum { V_NAME, V_TYPE, V_KIND, V_PRODUCER, V_OUTPUT_INDEX, V_USES, V_CONST, V_GRAPH, V_COUNT };
static const char *COST_SLOTS[] = {"times"};
static const char *MEM_SLOTS[] = {"persistent", "activation", "temporary"};
static const char *TYPE_SLOTS[] = {"dtype", "shape"};

#define MAX_OPERANDS 64 /* a line with more goes to the Python loop */

/* The byte units of graphir.attributes.BYTE_UNITS, smallest first, and their powers of two. */
static const char *BYTE_UNIT_NAMES[] = {"B", "KiB", "MiB", "GiB", "TiB"};
static const int BYTE_UNIT_SHIFTS[] = {0, 10, 20, 30, 40};
#define N_BYTE_UNITS 5

typedef struct {
    PyObject_HEAD
    /* The graph's tables and the parse's state, the IR classes and constants (references held). */
    PyObject *values;      /* dict: value name -> Value (graph._values) */
    PyObject *node_names;  /* dict: node name -> Node (graph._node_names) */
    PyObject *nodes;       /* dict: Node -> None (graph._nodes) */
    PyObject *seq;         /* iterator: the graph's node sequence numbers (graph._seq) */
    PyObject *type_cache;  /* dict: type text -> TensorType */
    PyObject *make_type;   /* callable: type text -> TensorType or None (a cache miss) */
    PyObject *source;      /* the parse's SourceLines */
    PyObject *pending;     /* dict: value name -> uses waiting for it (_Body.pending) */
    PyObject *keys;        /* set: the annotation keys of the nodes added unchecked (_Body.keys) */
    PyObject *controls;    /* list: (node, control names, line) to connect at the end (_Body.controls) */
    PyObject *graph;
    PyObject *result_kind; /* ValueKind.RESULT */
    PyObject *no_nodes;    /* the shared empty control list (graphir.ir._NO_NODES) */
    PyObject *default_kind;
    PyObject *byte_units;  /* dict: unit -> int (graphir.attributes.BYTE_UNITS) */
    PyObject *dtypes;      /* dict: dtype short name -> DType (graphir.fastline._DTYPES) */
    PyTypeObject *node_type, *value_type, *cost_type, *mem_type, *tensor_type;
    Py_ssize_t node_off[N_COUNT], value_off[V_COUNT], cost_off[1], mem_off[3], type_off[2];
    PyObject *cost_key, *mem_key, *minus_one, *zero;
    PyObject *unit_bytes[N_BYTE_UNITS]; /* BYTE_UNITS' ints in BYTE_UNIT_NAMES' order (borrowed from byte_units) */
} Reader;

/* Every object a reader holds a reference to, in make_reader's argument order, then its own constants. */
static const size_t READER_OBJECTS[] = {
    offsetof(Reader, values), offsetof(Reader, node_names), offsetof(Reader, nodes), offsetof(Reader, seq),
    offsetof(Reader, type_cache), offsetof(Reader, make_type), offsetof(Reader, source), offsetof(Reader, pending),
    offsetof(Reader, keys), offsetof(Reader, controls), offsetof(Reader, graph), offsetof(Reader, result_kind),
    offsetof(Reader, no_nodes), offsetof(Reader, default_kind), offsetof(Reader, byte_units), offsetof(Reader, dtypes),
    offsetof(Reader, node_type), offsetof(Reader, value_type), offsetof(Reader, cost_type), offsetof(Reader, mem_type),
    offsetof(Reader, tensor_type), offsetof(Reader, cost_key), offsetof(Reader, mem_key), offsetof(Reader, minus_one),
    offsetof(Reader, zero),
};
#define N_READER_GIVEN 21 /* the arguments of make_reader; the rest are made there */
#define READER_OBJECT(self, k) (*(PyObject **)((char *)(self) + READER_OBJECTS[k]))

static void reader_dealloc(Reader *self) {
    for (size_t k = 0; k < sizeof(READER_OBJECTS) / sizeof(READER_OBJECTS[0]); k++) Py_XDECREF(READER_OBJECT(self, k));
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Store a new reference into a fresh object's slot (its old value is NULL: the object is new). */
static inline void set_slot(PyObject *obj, Py_ssize_t offset, PyObject *value) {
    *(PyObject **)((char *)obj + offset) = value;
}

static inline PyObject *get_slot(PyObject *obj, Py_ssize_t offset) { return *(PyObject **)((char *)obj + offset); }

/* The offsets of `names`, the whole __slots__ of `type` apart from '__weakref__'; 0 on success,
 * 1 when the class is not as expected (no exception set), -1 on an error. */
static int slot_offsets(PyTypeObject *type, const char **names, int count, Py_ssize_t *offsets) {
    PyObject *slots = PyObject_GetAttrString((PyObject *)type, "__slots__");
    if (slots == NULL) return -1;
    PyObject *seq = PySequence_Fast(slots, "__slots__");
    Py_DECREF(slots);
    if (seq == NULL) return -1;
    int own = 0;
    for (Py_ssize_t k = 0; k < PySequence_Fast_GET_SIZE(seq); k++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, k);
        if (!PyUnicode_Check(item)) {
            Py_DECREF(seq);
            return 1;
        }
        if (PyUnicode_CompareWithASCIIString(item, "__weakref__") != 0) own++;
    }
    Py_DECREF(seq);
    if (own != count || type->tp_base != &PyBaseObject_Type) return 1;
    for (int k = 0; k < count; k++) {
        PyObject *descr = PyDict_GetItemString(type->tp_dict, names[k]); /* borrowed */
        if (descr == NULL || !Py_IS_TYPE(descr, &PyMemberDescr_Type)) return 1;
        PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
        if (member->type != T_OBJECT_EX || (member->flags & READONLY)) return 1;
        offsets[k] = member->offset;
    }
    return 0;
}

/* The slot offsets of Node, Value, Cost and Mem: 0, or 1 when a class is not as expected, -1 on an error. */
static int ir_slot_offsets(PyTypeObject *node_type, PyTypeObject *value_type, PyTypeObject *cost_type,
                           PyTypeObject *mem_type, Py_ssize_t *node_off, Py_ssize_t *value_off, Py_ssize_t *cost_off,
                           Py_ssize_t *mem_off) {
    int status = slot_offsets(node_type, NODE_SLOTS, N_COUNT, node_off);
    if (status == 0) status = slot_offsets(value_type, VALUE_SLOTS, V_COUNT, value_off);
    if (status == 0) status = slot_offsets(cost_type, COST_SLOTS, 1, cost_off);
    if (status == 0) status = slot_offsets(mem_type, MEM_SLOTS, 3, mem_off);
    return status;
}

/* make_reader(values, node_names, nodes, seq, type_cache, make_type, source, pending, keys, controls,
 *             graph, result_kind, no_nodes, default_kind, byte_units, dtypes, Node, Value, Cost, Mem,
 *             TensorType)
 * -> a reader, or None when a class's slots are not the ones this module sets. */
static PyTypeObject ReaderType;

static PyObject *make_reader(PyObject *module, PyObject *args) {
    PyObject *values, *node_names, *nodes, *seq, *type_cache, *make_type, *source, *pending, *keys, *controls, *graph;
    PyObject *result_kind, *no_nodes, *default_kind, *byte_units, *dtypes;
    PyTypeObject *node_type, *value_type, *cost_type, *mem_type, *tensor_type;
    if (!PyArg_ParseTuple(args, "O!O!O!OO!OOO!O!O!OOO!UO!O!O!O!O!O!O!:make_reader", &PyDict_Type, &values, &PyDict_Type,
                          &node_names, &PyDict_Type, &nodes, &seq, &PyDict_Type, &type_cache, &make_type, &source,
                          &PyDict_Type, &pending, &PySet_Type, &keys, &PyList_Type, &controls, &graph, &result_kind, &PyTuple_Type, &no_nodes,
                          &default_kind, &PyDict_Type, &byte_units, &PyDict_Type, &dtypes, &PyType_Type,
                          &node_type, &PyType_Type, &value_type, &PyType_Type, &cost_type, &PyType_Type, &mem_type,
                          &PyType_Type, &tensor_type))
        return NULL;
    Reader *self = PyObject_New(Reader, &ReaderType);
    if (self == NULL) return NULL;
    PyObject *given[N_READER_GIVEN] = {values, node_names, nodes, seq, type_cache, make_type, source, pending, keys,
                                       controls, graph, result_kind, no_nodes, default_kind, byte_units, dtypes,
                                       (PyObject *)node_type, (PyObject *)value_type, (PyObject *)cost_type,
                                       (PyObject *)mem_type, (PyObject *)tensor_type};
    for (size_t k = 0; k < sizeof(READER_OBJECTS) / sizeof(READER_OBJECTS[0]); k++)
        READER_OBJECT(self, k) = k < N_READER_GIVEN ? Py_NewRef(given[k]) : NULL;
    for (int u = 0; u < N_BYTE_UNITS; u++) { /* a table without a unit leaves its lines to Python */
        self->unit_bytes[u] = PyDict_GetItemString(byte_units, BYTE_UNIT_NAMES[u]);
    }
    self->cost_key = PyUnicode_InternFromString("cost");
    self->mem_key = PyUnicode_InternFromString("mem");
    self->minus_one = PyLong_FromLong(-1);
    self->zero = PyLong_FromLong(0);
    if (!self->cost_key || !self->mem_key || !self->minus_one || !self->zero) goto fail;
    int status = ir_slot_offsets(node_type, value_type, cost_type, mem_type, self->node_off, self->value_off,
                                 self->cost_off, self->mem_off);
    if (status == 0) status = slot_offsets(tensor_type, TYPE_SLOTS, 2, self->type_off);
    if (status < 0) goto fail;
    if (status > 0) {
        Py_DECREF(self);
        Py_RETURN_NONE;
    }
    return (PyObject *)self;
fail:
    Py_DECREF(self);
    return NULL;
}

/* ------------------------------------------------------------------ the line grammar */

static inline int is_name_char(char c) { /* graphir.lexer.NAME_CHARS: [A-Za-z0-9_.$#/-] */
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
           c == '$' || c == '#' || c == '/' || c == '-';
}
static inline int is_word_char(char c) { /* [A-Za-z0-9_] */
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}
static inline int is_digit(char c) { return c >= '0' && c <= '9'; }

static inline int starts(const char *s, Py_ssize_t p, Py_ssize_t end, const char *lit, Py_ssize_t len) {
    return end - p >= len && memcmp(s + p, lit, (size_t)len) == 0;
}

/* A `<sigil>name` at p (bare name characters only): its end, or -1. */
static inline Py_ssize_t scan_sigil_name(const char *s, Py_ssize_t p, Py_ssize_t end, char sigil) {
    if (p >= end || s[p] != sigil) return -1;
    Py_ssize_t q = p + 1;
    while (q < end && is_name_char(s[q])) q++;
    return q > p + 1 ? q : -1;
}
static Py_ssize_t scan_value_name(const char *s, Py_ssize_t p, Py_ssize_t end) { return scan_sigil_name(s, p, end, '%'); }
static Py_ssize_t scan_node_name(const char *s, Py_ssize_t p, Py_ssize_t end) { return scan_sigil_name(s, p, end, '@'); }

/* A type at p as the parser's TYPE pattern reads it ([a-z][a-z0-9]*\[[^\]]*\]), without spaces
 * inside the brackets (the Python loop splits type lists at ", ", so a spaced shape is not one of
 * its pieces): its end, or -1. */
static inline Py_ssize_t scan_type(const char *s, Py_ssize_t p, Py_ssize_t end) {
    if (p >= end || !(s[p] >= 'a' && s[p] <= 'z')) return -1;
    Py_ssize_t q = p + 1;
    while (q < end && ((s[q] >= 'a' && s[q] <= 'z') || is_digit(s[q]))) q++;
    if (q >= end || s[q] != '[') return -1;
    q++;
    while (q < end && s[q] != ']') {
        if (s[q] == ' ') return -1;
        q++;
    }
    return q < end ? q + 1 : -1;
}

/* A static type s[p:q] (dtype[d,d,...], ASCII digits, as graphir.parse_values._STATIC_TYPE reads
 * it) of a known dtype, built and cached under `piece` as LineScanner._type builds it; Py_None (a
 * new reference) for any other text (the type reader's), NULL on an error. */
static PyObject *static_type(Reader *self, PyObject *piece, const char *s, Py_ssize_t p, Py_ssize_t q) {
    Py_ssize_t open = p;
    while (s[open] != '[') open++; /* scan_type found one */
    Py_ssize_t dims = 0;
    Py_ssize_t k = open + 1;
    if (k < q - 1) {
        for (;;) { /* [0-9]+(,[0-9]+)* up to the closing bracket at q - 1 */
            Py_ssize_t digits = k;
            while (k < q - 1 && is_digit(s[k])) k++;
            if (k == digits) Py_RETURN_NONE;
            dims++;
            if (k == q - 1) break;
            if (s[k] != ',') Py_RETURN_NONE;
            k++;
        }
    }
    PyObject *short_name = PyUnicode_FromStringAndSize(s + p, open - p);
    if (short_name == NULL) return NULL;
    PyObject *dtype = PyDict_GetItemWithError(self->dtypes, short_name); /* borrowed */
    Py_DECREF(short_name);
    if (dtype == NULL) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    PyObject *shape = PyTuple_New(dims);
    if (shape == NULL) return NULL;
    k = open + 1;
    for (Py_ssize_t d = 0; d < dims; d++) {
        Py_ssize_t start = k;
        while (is_digit(s[k])) k++;
        PyObject *digits = PyUnicode_FromStringAndSize(s + start, k - start);
        PyObject *size = digits ? PyLong_FromUnicodeObject(digits, 10) : NULL;
        Py_XDECREF(digits);
        if (size == NULL) {
            Py_DECREF(shape);
            return NULL;
        }
        PyTuple_SET_ITEM(shape, d, size);
        k++; /* the comma */
    }
    PyObject *made = self->tensor_type->tp_alloc(self->tensor_type, 0);
    if (made == NULL) {
        Py_DECREF(shape);
        return NULL;
    }
    Py_INCREF(dtype);
    set_slot(made, self->type_off[0], dtype);
    set_slot(made, self->type_off[1], shape);
    if (PyDict_SetItem(self->type_cache, piece, made) < 0) {
        Py_DECREF(made);
        return NULL;
    }
    return made;
}

typedef Py_ssize_t (*ItemScan)(const char *s, Py_ssize_t p, Py_ssize_t end);

/* One or more items separated by ", " from p, each read by `scan`: their spans (past `skip`
 * sigil characters) into first/last and their number into *count; the end of the list, or -1. */
static Py_ssize_t scan_list(const char *s, Py_ssize_t p, Py_ssize_t end, ItemScan scan, int skip, Py_ssize_t *first,
                            Py_ssize_t *last, int *count) {
    *count = 0;
    for (;;) {
        if (*count == MAX_OPERANDS) return -1;
        Py_ssize_t q = scan(s, p, end);
        if (q < 0) return -1;
        first[*count] = p + skip;
        last[(*count)++] = q;
        if (!starts(s, q, end, ", ", 2)) return q;
        p = q + 2;
    }
}

/* The type of text s[p:q]: the cache's, else the type reader's (which caches it); a new
 * reference, Py_None (a new reference) when it is not a type, NULL on an error. */
static PyObject *type_of(Reader *self, PyObject *text_obj, Py_ssize_t p, Py_ssize_t q) {
    PyObject *piece = PyUnicode_Substring(text_obj, p, q);
    if (piece == NULL) return NULL;
    PyObject *found = PyDict_GetItemWithError(self->type_cache, piece); /* borrowed */
    if (found != NULL) {
        Py_DECREF(piece);
        Py_INCREF(found);
        return found;
    }
    if (PyErr_Occurred()) {
        Py_DECREF(piece);
        return NULL;
    }
    const char *s = (const char *)PyUnicode_DATA(text_obj);
    PyObject *made = static_type(self, piece, s, p, q);
    if (made != Py_None) { /* built (and cached), or an error */
        Py_DECREF(piece);
        return made;
    }
    Py_DECREF(made);
    made = PyObject_CallOneArg(self->make_type, piece);
    Py_DECREF(piece);
    if (made == NULL) return NULL;
    if (!PyObject_IsTrue(made)) { /* the Python loop's `cache_get(piece) or make_type(piece)`, then all() */
        Py_DECREF(made);
        Py_RETURN_NONE;
    }
    return made;
}

/* One parsed line: positions in the text. */
typedef struct {
    Py_ssize_t name, name_end, op, op_end;
    Py_ssize_t operand[MAX_OPERANDS], operand_end[MAX_OPERANDS], type[MAX_OPERANDS], type_end[MAX_OPERANDS];
    Py_ssize_t control[MAX_OPERANDS], control_end[MAX_OPERANDS];
    int operands, types, controls;
    Py_ssize_t output, output_end;
    int has_cost, has_mem;
    Py_ssize_t cost, cost_end;
    const char *cost_exp;
    Py_ssize_t field[3], field_end[3];
    PyObject *field_unit[3]; /* borrowed from byte_units */
} Line;

/* The shape of a line from p to end (its newline), read with no object made: 1 when it is one
 * this module builds, 0 when the Python loop must read it. */
static int scan_line(Reader *self, const char *s, Py_ssize_t p, Py_ssize_t end, Line *line) {
    line->cost = line->cost_end = 0;
    line->cost_exp = "e0";
    while (p < end && s[p] == ' ') p++;
    line->name = p + 1;
    p = scan_value_name(s, p, end);
    if (p < 0) return 0;
    line->name_end = p;
    if (!starts(s, p, end, " = ", 3)) return 0; /* a comma: several results */
    p += 3;
    line->op = p;
    if (p >= end || !((s[p] >= 'a' && s[p] <= 'z') || (s[p] >= 'A' && s[p] <= 'Z') || s[p] == '_')) return 0;
    int dotted = 0;
    p++;
    while (p < end && ((s[p] >= 'a' && s[p] <= 'z') || (s[p] >= 'A' && s[p] <= 'Z') || is_digit(s[p]) ||
                       s[p] == '_' || s[p] == '.' || s[p] == '$')) {
        dotted |= s[p] == '.';
        p++;
    }
    line->op_end = p;
    if (!dotted || p >= end || s[p] != '(') return 0; /* " @name", or not a node line */
    p++;
    line->operands = line->controls = line->types = 0;
    if (p < end && s[p] != ')') { /* operands: %name, ... */
        p = scan_list(s, p, end, scan_value_name, 1, line->operand, line->operand_end, &line->operands);
        if (p < 0) return 0;
    }
    if (p >= end || s[p] != ')') return 0;
    p++;
    if (starts(s, p, end, " ctrl(", 6)) { /* control inputs: @name, ... */
        p = scan_list(s, p + 6, end, scan_node_name, 1, line->control, line->control_end, &line->controls);
        if (p < 0 || p >= end || s[p] != ')') return 0;
        p++;
    }
    if (!starts(s, p, end, " : (", 4)) return 0; /* params, or not canonical */
    p += 4;
    if (p < end && s[p] != ')') { /* operand types: T, ... */
        p = scan_list(s, p, end, scan_type, 0, line->type, line->type_end, &line->types);
        if (p < 0) return 0;
    }
    if (!starts(s, p, end, ") -> ", 5)) return 0;
    p += 5;
    line->output = p;
    p = scan_type(s, p, end); /* "(...)": several results or none */
    if (p < 0) return 0;
    line->output_end = p;
    line->has_cost = line->has_mem = 0;
    if (p == end) return 1;
    if (!starts(s, p, end, " [", 2)) return 0;
    p += 2;
    if (starts(s, p, end, "cost = ", 7)) {
        /* graphir.fastline's duration: a plain decimal (\d+(\.\d*)?) and a time unit, then no word
         * character; the Python loop reads it with seconds_from, which takes text of at most 28
         * characters without an exponent through float("<text>e<exponent>"). */
        p += 7;
        line->cost = p;
        while (p < end && is_digit(s[p])) p++;
        if (p == line->cost) return 0;
        if (p < end && s[p] == '.') {
            p++;
            while (p < end && is_digit(s[p])) p++;
        }
        line->cost_end = p;
        if (p - line->cost > 28 || p >= end) return 0;
        if (starts(s, p, end, "ns", 2)) {
            line->cost_exp = "e-9";
            p += 2;
        } else if (starts(s, p, end, "us", 2)) {
            line->cost_exp = "e-6";
            p += 2;
        } else if (starts(s, p, end, "ms", 2)) {
            line->cost_exp = "e-3";
            p += 2;
        } else if (s[p] == 's') {
            line->cost_exp = "e0";
            p += 1;
        } else {
            return 0;
        }
        if (p < end && is_word_char(s[p])) return 0;
        line->has_cost = 1;
        if (starts(s, p, end, "]", 1) && p + 1 == end) return 1;
        if (!starts(s, p, end, ", ", 2)) return 0;
        p += 2;
    }
    if (!starts(s, p, end, "mem = {", 7)) return 0;
    p += 7;
    static const char *fields[] = {"persistent = ", "activation = ", "temporary = "};
    static const Py_ssize_t lengths[] = {13, 13, 12};
    int any = 0;
    for (int f = 0; f < 3; f++) {
        line->field[f] = -1;
        if (any) {
            if (!starts(s, p, end, ", ", 2) || !starts(s, p + 2, end, fields[f], lengths[f])) continue;
            p += 2;
        } else if (!starts(s, p, end, fields[f], lengths[f])) {
            continue;
        }
        p += lengths[f];
        Py_ssize_t digits = p;
        while (p < end && is_digit(s[p])) p++;
        if (p == digits || p - digits > 18) return 0; /* 18 digits: within a C long long before the unit */
        line->field[f] = digits;
        line->field_end[f] = p;
        int u = 0;
        while (u < N_BYTE_UNITS && !starts(s, p, end, BYTE_UNIT_NAMES[u], (Py_ssize_t)strlen(BYTE_UNIT_NAMES[u]))) u++;
        if (u == N_BYTE_UNITS) return 0;
        p += (Py_ssize_t)strlen(BYTE_UNIT_NAMES[u]);
        if (p < end && is_word_char(s[p])) return 0;
        line->field_unit[f] = self->unit_bytes[u];
        if (line->field_unit[f] == NULL) return 0;
        any = 1;
    }
    if (!any || !starts(s, p, end, "}]", 2) || p + 2 != end) return 0;
    line->has_mem = 1;
    return 1;
}

/* The annotations of a scanned line, as graphir.fastline's cost-and-mem reader makes them: a new
 * dict, Py_None when the Python loop must read the line, NULL on an error. */
static PyObject *annotations_of(Reader *self, PyObject *text_obj, const char *s, Line *line) {
    PyObject *annotations = PyDict_New();
    if (annotations == NULL) return NULL;
    if (line->has_cost) {
        char buffer[40];
        Py_ssize_t length = line->cost_end - line->cost;
        memcpy(buffer, s + line->cost, (size_t)length);
        strcpy(buffer + length, line->cost_exp);
        double seconds = PyOS_string_to_double(buffer, NULL, NULL);
        if (seconds == -1.0 && PyErr_Occurred()) goto fail;
        if (!(seconds >= 0.0 && seconds < Py_HUGE_VAL)) {
            Py_DECREF(annotations);
            Py_RETURN_NONE;
        }
        PyObject *number = PyFloat_FromDouble(seconds);
        PyObject *pair = number ? PyTuple_Pack(2, self->default_kind, number) : NULL;
        Py_XDECREF(number);
        PyObject *times = pair ? PyTuple_Pack(1, pair) : NULL;
        Py_XDECREF(pair);
        if (times == NULL) goto fail;
        PyObject *cost = self->cost_type->tp_alloc(self->cost_type, 0);
        if (cost == NULL) {
            Py_DECREF(times);
            goto fail;
        }
        set_slot(cost, self->cost_off[0], times);
        int failed = PyDict_SetItem(annotations, self->cost_key, cost);
        Py_DECREF(cost);
        if (failed) goto fail;
    }
    if (line->has_mem) {
        PyObject *mem = self->mem_type->tp_alloc(self->mem_type, 0);
        if (mem == NULL) goto fail;
        for (int f = 0; f < 3; f++) {
            PyObject *bytes;
            if (line->field[f] < 0) {
                bytes = self->zero;
                Py_INCREF(bytes);
            } else {
                char digits[24];
                Py_ssize_t length = line->field_end[f] - line->field[f];
                memcpy(digits, s + line->field[f], (size_t)length);
                digits[length] = 0;
                PyObject *count = PyLong_FromString(digits, NULL, 10);
                bytes = count ? PyNumber_Multiply(count, line->field_unit[f]) : NULL;
                Py_XDECREF(count);
                if (bytes == NULL) {
                    Py_DECREF(mem);
                    goto fail;
                }
            }
            set_slot(mem, self->mem_off[f], bytes);
        }
        int failed = PyDict_SetItem(annotations, self->mem_key, mem);
        Py_DECREF(mem);
        if (failed) goto fail;
    }
    return annotations;
fail:
    Py_DECREF(annotations);
    return NULL;
}

/* reader(text, pos, number) -> (pos, number): build the nodes of the lines from `pos` (the start
 * of line `number + 1`) while they are of the subset this module reads; the first other line is
 * left unread. */
static PyObject *reader_call(Reader *self, PyObject *args, PyObject *kwargs) {
    PyObject *text_obj;
    Py_ssize_t pos, number;
    if (!PyArg_ParseTuple(args, "Unn:reader", &text_obj, &pos, &number)) return NULL;
    Py_ssize_t size = PyUnicode_GET_LENGTH(text_obj);
    if (!PyUnicode_IS_ASCII(text_obj)) return Py_BuildValue("nn", pos, number);
    const char *s = (const char *)PyUnicode_DATA(text_obj);
    PyObject *types[MAX_OPERANDS];
    PyObject *operand_values[MAX_OPERANDS]; /* borrowed */
    Line line;
    int seen_cost = 0, seen_mem = 0;
    PyObject *result = NULL;
    while (pos <= size) {
        const char *newline = memchr(s + pos, '\n', (size_t)(size - pos));
        Py_ssize_t eol = newline ? newline - s : size;
        if (!scan_line(self, s, pos, eol, &line)) break;
        /* The Python loop's order: annotations, the result's type, the result's name, then the
         * operands' names and types, then the node's name; a line it would stop at is left here. */
        PyObject *annotations = annotations_of(self, text_obj, s, &line);
        if (annotations == NULL) goto done;
        if (annotations == Py_None) {
            Py_DECREF(annotations);
            break;
        }
        PyObject *result_type = type_of(self, text_obj, line.output, line.output_end);
        if (result_type == NULL || result_type == Py_None) {
            Py_DECREF(annotations);
            Py_XDECREF(result_type);
            if (result_type == NULL) goto done;
            break;
        }
        PyObject *name = PyUnicode_Substring(text_obj, line.name, line.name_end);
        if (name == NULL) {
            Py_DECREF(annotations);
            Py_DECREF(result_type);
            goto done;
        }
        int stop = 0;
        int known = PyDict_Contains(self->values, name);
        if (known != 0) stop = known < 0 ? -1 : 1;
        /* Operands without types or types without operands: stopped before any type is read;
         * otherwise every piece is read (a miss calls the type reader) before the checks. */
        int ntypes = 0;
        if (!stop && (line.operands == 0) != (line.types == 0)) stop = 1;
        if (!stop) {
            int missing = 0;
            for (int k = 0; k < line.types; k++) {
                types[k] = type_of(self, text_obj, line.type[k], line.type_end[k]);
                if (types[k] == NULL) {
                    stop = -1;
                    break;
                }
                ntypes++;
                missing |= types[k] == Py_None;
            }
            if (!stop && (missing || line.types != line.operands)) stop = 1;
        }
        /* Beyond the Python loop's checks: every operand defined with the declared type (else its
         * pending and mismatch bookkeeping), and no earlier line waiting for this result. */
        for (int k = 0; !stop && k < line.operands; k++) {
            PyObject *value_name = PyUnicode_Substring(text_obj, line.operand[k], line.operand_end[k]);
            if (value_name == NULL) {
                stop = -1;
                break;
            }
            PyObject *value = PyDict_GetItemWithError(self->values, value_name); /* borrowed */
            Py_DECREF(value_name);
            if (value == NULL) {
                stop = PyErr_Occurred() ? -1 : 1;
                break;
            }
            if (!PyObject_TypeCheck(value, self->value_type)) {
                stop = 1;
                break;
            }
            PyObject *value_type = get_slot(value, self->value_off[V_TYPE]);
            if (value_type != types[k]) {
                int differs = PyObject_RichCompareBool(value_type, types[k], Py_NE);
                if (differs) {
                    stop = differs < 0 ? -1 : 1;
                    break;
                }
            }
            operand_values[k] = value;
        }
        if (!stop) {
            known = PyDict_Contains(self->node_names, name);
            if (known != 0) stop = known < 0 ? -1 : 1;
        }
        if (!stop && PyDict_GET_SIZE(self->pending)) {
            known = PyDict_Contains(self->pending, name);
            if (known != 0) stop = known < 0 ? -1 : 1;
        }
        if (stop) {
            for (int k = 0; k < ntypes; k++) Py_DECREF(types[k]);
            Py_DECREF(annotations);
            Py_DECREF(result_type);
            Py_DECREF(name);
            if (stop < 0) goto done;
            break;
        }
        /* Build what Graph.add_node_unchecked and _Body.connect build. */
        PyObject *op = PyUnicode_Substring(text_obj, line.op, line.op_end);
        PyObject *seq = op ? PyIter_Next(self->seq) : NULL;
        PyObject *line_number = seq ? PyLong_FromSsize_t(number + 1) : NULL;
        PyObject *inputs = line_number ? PyList_New(line.operands) : NULL;
        PyObject *outputs = inputs ? PyList_New(1) : NULL;
        PyObject *params = outputs ? PyDict_New() : NULL;
        PyObject *uses = params ? PyList_New(0) : NULL;
        PyObject *node = uses ? self->node_type->tp_alloc(self->node_type, 0) : NULL;
        PyObject *value = node ? self->value_type->tp_alloc(self->value_type, 0) : NULL;
        for (int k = 0; k < ntypes; k++) Py_DECREF(types[k]);
        if (value == NULL) {
            if (seq == NULL && op != NULL && !PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "node numbers ran out");
            Py_XDECREF(op);
            Py_XDECREF(seq);
            Py_XDECREF(line_number);
            Py_XDECREF(inputs);
            Py_XDECREF(outputs);
            Py_XDECREF(params);
            Py_XDECREF(uses);
            Py_XDECREF(node);
            Py_DECREF(annotations);
            Py_DECREF(result_type);
            Py_DECREF(name);
            goto done;
        }
        PyUnicode_InternInPlace(&op);
        number++;
        const Py_ssize_t *n_off = self->node_off, *v_off = self->value_off;
        set_slot(node, n_off[N_OP], op);
        Py_INCREF(name);
        set_slot(node, n_off[N_NAME], name);
        set_slot(node, n_off[N_INPUTS], inputs);
        set_slot(node, n_off[N_OUTPUTS], outputs);
        set_slot(node, n_off[N_PARAMS], params);
        set_slot(node, n_off[N_ANNOTATIONS], annotations);
        Py_INCREF(self->graph);
        set_slot(node, n_off[N_GRAPH], self->graph);
        set_slot(node, n_off[N_SEQ], seq);
        Py_INCREF(self->minus_one);
        set_slot(node, n_off[N_INDEX_POS], self->minus_one);
        Py_INCREF(self->source);
        set_slot(node, n_off[N_LOC], self->source);
        set_slot(node, n_off[N_LINE], line_number);
        Py_INCREF(self->no_nodes);
        set_slot(node, n_off[N_CONTROL_INPUTS], self->no_nodes);
        Py_INCREF(self->no_nodes);
        set_slot(node, n_off[N_CONTROL_USERS], self->no_nodes);
        set_slot(value, v_off[V_NAME], name); /* the reference made by the substring */
        set_slot(value, v_off[V_TYPE], result_type);
        Py_INCREF(self->result_kind);
        set_slot(value, v_off[V_KIND], self->result_kind);
        Py_INCREF(node);
        set_slot(value, v_off[V_PRODUCER], node);
        Py_INCREF(self->zero);
        set_slot(value, v_off[V_OUTPUT_INDEX], self->zero);
        set_slot(value, v_off[V_USES], uses);
        Py_INCREF(Py_None);
        set_slot(value, v_off[V_CONST], Py_None);
        Py_INCREF(self->graph);
        set_slot(value, v_off[V_GRAPH], self->graph);
        PyList_SET_ITEM(outputs, 0, value); /* the list owns the new reference */
        seen_cost |= line.has_cost;
        seen_mem |= line.has_mem;
        int failed = PyDict_SetItem(self->values, name, value) || PyDict_SetItem(self->nodes, node, Py_None) ||
                     PyDict_SetItem(self->node_names, name, node);
        for (int k = 0; !failed && k < line.operands; k++) {
            PyObject *operand = operand_values[k];
            Py_INCREF(operand);
            PyList_SET_ITEM(inputs, k, operand);
            PyObject *index = PyLong_FromLong(k);
            PyObject *use = index ? PyTuple_Pack(2, node, index) : NULL;
            Py_XDECREF(index);
            failed = use == NULL || PyList_Append(get_slot(operand, v_off[V_USES]), use);
            Py_XDECREF(use);
        }
        if (!failed && line.controls) { /* connected at the end, as _Body.connect leaves them */
            PyObject *names = PyList_New(line.controls);
            for (int k = 0; names != NULL && k < line.controls; k++) {
                PyObject *control = PyUnicode_Substring(text_obj, line.control[k], line.control_end[k]);
                if (control == NULL) Py_CLEAR(names);
                else PyList_SET_ITEM(names, k, control);
            }
            PyObject *entry = names ? PyTuple_Pack(3, node, names, line_number) : NULL;
            Py_XDECREF(names);
            failed = entry == NULL || PyList_Append(self->controls, entry);
            Py_XDECREF(entry);
        }
        Py_DECREF(node);
        if (failed) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "the compiled reader could not connect a node");
            goto done;
        }
        pos = eol + 1;
    }
    result = Py_BuildValue("nn", pos, number);
done:
    if ((seen_cost && PySet_Add(self->keys, self->cost_key)) || (seen_mem && PySet_Add(self->keys, self->mem_key))) {
        Py_CLEAR(result);
    }
    return result;
}

static PyTypeObject ReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "graphir._girtext.Reader",
    .tp_basicsize = sizeof(Reader),
    .tp_dealloc = (destructor)reader_dealloc,
    .tp_call = (ternaryfunc)reader_call,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "reader(text, pos, number) -> (pos, number): the compiled plain-line loop of one graph body.",
};


/* ================================================================== the writer
 *
 * graphir/printer.py formats a node line with memo tables and compiled annotation plans; the
 * writer below formats the commonest node lines into one buffer: one result, no params, bare
 * ASCII names, and annotations among the built-in keys whose direct formatters are in force,
 * with values of their plain types (a default-kind cost, a Mem of ints, int group and order, a
 * float start and finish, a device or colocation class of printable ASCII without quotes or
 * backslashes). Any other node is formatted by the printer's own function (the `fallback`), so
 * the text is the same bytes either way; tests/unit/test_girtext_writer.py prints modules both
 * ways. Durations follow graphir.attributes._format_duration_general (the one rule: repr's
 * digits, the unit by magnitude), byte sizes format_bytes.
 */

typedef struct {
    char *data;
    Py_ssize_t size, capacity;
} Buffer;

static int buffer_reserve(Buffer *b, Py_ssize_t more) {
    if (b->size + more <= b->capacity) return 0;
    Py_ssize_t capacity = b->capacity ? b->capacity : 1 << 16;
    while (capacity < b->size + more) capacity *= 2;
    char *data = PyMem_Realloc(b->data, (size_t)capacity);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = data;
    b->capacity = capacity;
    return 0;
}

static inline int buffer_add(Buffer *b, const char *text, Py_ssize_t length) {
    if (buffer_reserve(b, length) < 0) return -1;
    memcpy(b->data + b->size, text, (size_t)length);
    b->size += length;
    return 0;
}

static inline int buffer_str(Buffer *b, const char *text) { return buffer_add(b, text, (Py_ssize_t)strlen(text)); }

/* Append an ASCII str; 1 when it is not ASCII (nothing appended), -1 on an error. */
static inline int buffer_ascii(Buffer *b, PyObject *text) {
    if (!PyUnicode_IS_ASCII(text)) return 1;
    return buffer_add(b, (const char *)PyUnicode_DATA(text), PyUnicode_GET_LENGTH(text));
}

/* Append a name as the printer's format_name leaves a bare one; 1 when it is not bare. */
static inline int buffer_name(Buffer *b, PyObject *name) {
    if (!PyUnicode_CheckExact(name) || !PyUnicode_IS_ASCII(name)) return 1;
    const char *s = (const char *)PyUnicode_DATA(name);
    Py_ssize_t n = PyUnicode_GET_LENGTH(name);
    if (n == 0) return 1;
    for (Py_ssize_t k = 0; k < n; k++)
        if (!is_name_char(s[k])) return 1;
    return buffer_add(b, s, n);
}

/* graphir.attributes.format_duration of a finite float: 0 when appended, 1 for a value the
 * printer formats (not finite), -1 on an error. */
static int buffer_duration(Buffer *b, double seconds) {
    if (seconds == 0.0) return buffer_str(b, "0s");
    if (!isfinite(seconds)) return 1;
    if (seconds < 0) {
        if (buffer_str(b, "-") < 0) return -1;
        seconds = -seconds;
    }
    const char *unit;
    int shift;
    if (seconds < 1e-6) {
        unit = "ns";
        shift = 9;
    } else if (seconds < 1e-3) {
        unit = "us";
        shift = 6;
    } else if (seconds < 1.0) {
        unit = "ms";
        shift = 3;
    } else {
        unit = "s";
        shift = 0;
    }
    char *text = PyOS_double_to_string(seconds, 'r', 0, Py_DTSF_ADD_DOT_0, NULL); /* repr(seconds) */
    if (text == NULL) return -1;
    char significant[64];
    int size = 0, point;
    char *e = strchr(text, 'e');
    if (e != NULL) { /* d.ddde-XX or de-XX */
        significant[size++] = text[0];
        for (char *c = text + 2; c < e; c++) significant[size++] = *c;
        point = atoi(e + 1) + shift + 1;
    } else {
        char *dot = strchr(text, '.');
        int whole = (int)(dot - text);
        if (whole == 1 && text[0] == '0') { /* "0.000ddd" */
            char *c = dot + 1;
            int fraction = (int)strlen(c);
            while (*c == '0') c++;
            for (; *c; c++) significant[size++] = *c;
            point = shift + size - fraction;
        } else {
            for (char *c = text; *c; c++)
                if (*c != '.') significant[size++] = *c;
            while (size > 0 && significant[size - 1] == '0') size--;
            point = whole + shift;
        }
    }
    PyMem_Free(text);
    /* Zeros may run to hundreds of places (1e300s, 5e-324s): written straight into the buffer. */
    if (buffer_reserve(b, size + (point < 0 ? -point : point) + 8) < 0) return -1;
    char *out = b->data + b->size;
    Py_ssize_t n = 0;
    if (point <= 0) {
        out[n++] = '0';
        out[n++] = '.';
        for (int k = 0; k < -point; k++) out[n++] = '0';
        memcpy(out + n, significant, (size_t)size);
        n += size;
    } else if (point >= size) {
        memcpy(out + n, significant, (size_t)size);
        n += size;
        for (int k = 0; k < point - size; k++) out[n++] = '0';
    } else {
        memcpy(out + n, significant, (size_t)point);
        n += point;
        out[n++] = '.';
        memcpy(out + n, significant + point, (size_t)(size - point));
        n += size - point;
    }
    b->size += n;
    return buffer_str(b, unit);
}

/* graphir.attributes.format_bytes of a non-negative count. */
static int buffer_bytes(Buffer *b, long long count) {
    char out[48];
    if (count != 0 && (count & 1023) == 0) {
        for (int u = N_BYTE_UNITS - 1; u > 0; u--) { /* the largest unit that divides it */
            long long size = 1LL << BYTE_UNIT_SHIFTS[u];
            if (count % size == 0) {
                snprintf(out, sizeof out, "%lld%s", count / size, BYTE_UNIT_NAMES[u]);
                return buffer_str(b, out);
            }
        }
    }
    snprintf(out, sizeof out, "%lldB", count);
    return buffer_str(b, out);
}

/* An exact int that fits a long long and is at least `low`: 0 with *out set, else 1 (or -1). */
static inline int exact_int(PyObject *value, long long low, long long *out) {
    if (!PyLong_CheckExact(value)) return 1;
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (overflow || v < low) return 1;
    *out = v;
    return 0;
}

enum { K_COLOCATE, K_COST, K_DEVICE, K_FINISH, K_GROUP, K_MEM, K_ORDER, K_START, K_COUNT };
static const char *KEY_NAMES[] = {"colocate", "cost", "device", "finish", "group", "mem", "order", "start"};

typedef struct {
    PyObject_HEAD
    PyTypeObject *node_type, *value_type, *cost_type, *mem_type;
    Py_ssize_t node_off[N_COUNT], value_off[V_COUNT], cost_off[1], mem_off[3];
    PyObject *type_texts;   /* dict: id(type) -> its text (the printer's _TypeText table) */
    PyObject *type_text;    /* callable: type -> its text (a miss; fills the table) */
    PyObject *default_kind;
    PyObject *keys;         /* dict: annotation key -> its K_ rank, for the keys formatted here */
    PyObject *indent, *end; /* ASCII strs */
} Writer;

static void writer_dealloc(Writer *self) {
    Py_XDECREF(self->node_type);
    Py_XDECREF(self->value_type);
    Py_XDECREF(self->cost_type);
    Py_XDECREF(self->mem_type);
    Py_XDECREF(self->type_texts);
    Py_XDECREF(self->type_text);
    Py_XDECREF(self->default_kind);
    Py_XDECREF(self->keys);
    Py_XDECREF(self->indent);
    Py_XDECREF(self->end);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The text of a value's type; 1 when it is not ASCII, -1 on an error. */
static int buffer_type(Writer *self, Buffer *b, PyObject *type) {
    PyObject *key = PyLong_FromVoidPtr(type);
    if (key == NULL) return -1;
    PyObject *text = PyDict_GetItemWithError(self->type_texts, key); /* borrowed */
    Py_DECREF(key);
    if (text != NULL) return PyUnicode_CheckExact(text) ? buffer_ascii(b, text) : 1;
    if (PyErr_Occurred()) return -1;
    text = PyObject_CallOneArg(self->type_text, type);
    if (text == NULL) return -1;
    int status = PyUnicode_CheckExact(text) ? buffer_ascii(b, text) : 1;
    Py_DECREF(text);
    return status;
}

/* One annotation's value text; 0 appended, 1 declined, -1 error. */
static int buffer_annotation(Writer *self, Buffer *b, int rank, PyObject *value) {
    switch (rank) {
    case K_COST: {
        if (!Py_IS_TYPE(value, self->cost_type)) return 1;
        PyObject *times = get_slot(value, self->cost_off[0]);
        if (times == NULL || !PyTuple_CheckExact(times) || PyTuple_GET_SIZE(times) != 1) return 1;
        PyObject *pair = PyTuple_GET_ITEM(times, 0);
        if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2) return 1;
        PyObject *kind = PyTuple_GET_ITEM(pair, 0), *seconds = PyTuple_GET_ITEM(pair, 1);
        if (!PyUnicode_CheckExact(kind) || PyUnicode_Compare(kind, self->default_kind) != 0) return PyErr_Occurred() ? -1 : 1;
        if (!PyFloat_CheckExact(seconds)) return 1;
        return buffer_duration(b, PyFloat_AS_DOUBLE(seconds));
    }
    case K_START:
    case K_FINISH:
        if (!PyFloat_CheckExact(value)) return 1;
        return buffer_duration(b, PyFloat_AS_DOUBLE(value));
    case K_GROUP:
    case K_ORDER: {
        long long v;
        int status = exact_int(value, LLONG_MIN, &v);
        if (status) return status;
        char out[32];
        snprintf(out, sizeof out, "%lld", v);
        return buffer_str(b, out);
    }
    case K_DEVICE:
    case K_COLOCATE: {
        if (!PyUnicode_CheckExact(value) || !PyUnicode_IS_ASCII(value)) return 1;
        const char *s = (const char *)PyUnicode_DATA(value);
        Py_ssize_t n = PyUnicode_GET_LENGTH(value);
        for (Py_ssize_t k = 0; k < n; k++)
            if (s[k] < 0x20 || s[k] == 0x7f || s[k] == '"' || s[k] == '\\') return 1;
        if (buffer_str(b, "\"") < 0 || buffer_add(b, s, n) < 0) return -1;
        return buffer_str(b, "\"");
    }
    case K_MEM: {
        if (!Py_IS_TYPE(value, self->mem_type)) return 1;
        static const char *fields[] = {"persistent = ", "activation = ", "temporary = "};
        long long counts[3];
        for (int f = 0; f < 3; f++) {
            PyObject *count = get_slot(value, self->mem_off[f]);
            if (count == NULL) return 1;
            int status = exact_int(count, 0, &counts[f]);
            if (status) return status;
        }
        if (buffer_str(b, "{") < 0) return -1;
        int first = 1;
        for (int f = 0; f < 3; f++) {
            if (!counts[f]) continue;
            if ((!first && buffer_str(b, ", ") < 0) || buffer_str(b, fields[f]) < 0 || buffer_bytes(b, counts[f]) < 0)
                return -1;
            first = 0;
        }
        return buffer_str(b, "}");
    }
    }
    return 1;
}

/* One node line into the buffer: 0 written, 1 declined (the buffer may hold part of it), -1 error. */
static int write_node(Writer *self, Buffer *b, PyObject *node) {
    if (!Py_IS_TYPE(node, self->node_type)) return 1;
    const Py_ssize_t *n_off = self->node_off, *v_off = self->value_off;
    PyObject *outputs = get_slot(node, n_off[N_OUTPUTS]), *inputs = get_slot(node, n_off[N_INPUTS]);
    PyObject *params = get_slot(node, n_off[N_PARAMS]), *annotations = get_slot(node, n_off[N_ANNOTATIONS]);
    PyObject *controls = get_slot(node, n_off[N_CONTROL_INPUTS]), *op = get_slot(node, n_off[N_OP]);
    PyObject *name = get_slot(node, n_off[N_NAME]);
    if (!outputs || !inputs || !params || !annotations || !controls || !op || !name) return 1;
    if (!PyList_CheckExact(outputs) || PyList_GET_SIZE(outputs) != 1 || !PyList_CheckExact(inputs)) return 1;
    if (!PyDict_CheckExact(params) || PyDict_GET_SIZE(params) != 0 || !PyDict_CheckExact(annotations)) return 1;
    if (!PyUnicode_CheckExact(op)) return 1;
    PyObject *first = PyList_GET_ITEM(outputs, 0);
    if (!Py_IS_TYPE(first, self->value_type)) return 1;
    PyObject *first_name = get_slot(first, v_off[V_NAME]), *first_type = get_slot(first, v_off[V_TYPE]);
    if (!first_name || !first_type) return 1;
    int status;
    if (buffer_ascii(b, self->indent) || buffer_str(b, "%")) return -1;
    if ((status = buffer_name(b, first_name))) return status;
    if (buffer_str(b, " = ")) return -1;
    if ((status = buffer_ascii(b, op))) return status;
    if (!PyUnicode_CheckExact(name)) return 1;
    int same = PyUnicode_CheckExact(first_name) ? PyUnicode_Compare(first_name, name) : -1;
    if (same == -1 && PyErr_Occurred()) return -1;
    if (same != 0) {
        if (buffer_str(b, " @")) return -1;
        if ((status = buffer_name(b, name))) return status;
    }
    if (buffer_str(b, "(")) return -1;
    Py_ssize_t count = PyList_GET_SIZE(inputs);
    for (Py_ssize_t k = 0; k < count; k++) {
        PyObject *value = PyList_GET_ITEM(inputs, k);
        if (!Py_IS_TYPE(value, self->value_type) || get_slot(value, v_off[V_NAME]) == NULL) return 1;
        if ((k && buffer_str(b, ", ")) || buffer_str(b, "%")) return -1;
        if ((status = buffer_name(b, get_slot(value, v_off[V_NAME])))) return status;
    }
    if (buffer_str(b, ")")) return -1;
    PyObject *control_seq = PySequence_Fast(controls, "control inputs");
    if (control_seq == NULL) return -1;
    Py_ssize_t ncontrols = PySequence_Fast_GET_SIZE(control_seq);
    status = 0;
    for (Py_ssize_t k = 0; !status && k < ncontrols; k++) {
        PyObject *control = PySequence_Fast_GET_ITEM(control_seq, k);
        if (!Py_IS_TYPE(control, self->node_type) || get_slot(control, n_off[N_NAME]) == NULL) {
            status = 1;
            break;
        }
        if (buffer_str(b, k ? ", @" : " ctrl(@")) status = -1;
        else status = buffer_name(b, get_slot(control, n_off[N_NAME]));
    }
    Py_DECREF(control_seq);
    if (status) return status;
    if (ncontrols && buffer_str(b, ")")) return -1;
    if (buffer_str(b, " : (")) return -1;
    for (Py_ssize_t k = 0; k < count; k++) {
        PyObject *type = get_slot(PyList_GET_ITEM(inputs, k), v_off[V_TYPE]);
        if (type == NULL) return 1;
        if (k && buffer_str(b, ", ")) return -1;
        if ((status = buffer_type(self, b, type))) return status;
    }
    if (buffer_str(b, ") -> ")) return -1;
    if ((status = buffer_type(self, b, first_type))) return status;
    if (PyDict_GET_SIZE(annotations)) {
        PyObject *by_rank[K_COUNT] = {NULL};
        PyObject *key, *value;
        Py_ssize_t position = 0;
        while (PyDict_Next(annotations, &position, &key, &value)) {
            PyObject *rank = PyUnicode_CheckExact(key) ? PyDict_GetItemWithError(self->keys, key) : NULL;
            if (rank == NULL) return PyErr_Occurred() ? -1 : 1;
            by_rank[PyLong_AsLong(rank)] = value;
        }
        int written = 0;
        for (int r = 0; r < K_COUNT; r++) {
            if (by_rank[r] == NULL) continue;
            if (buffer_str(b, written ? ", " : " [") || buffer_str(b, KEY_NAMES[r]) || buffer_str(b, " = ")) return -1;
            if ((status = buffer_annotation(self, b, r, by_rank[r]))) return status;
            written = 1;
        }
        if (buffer_str(b, "]")) return -1;
    }
    return buffer_ascii(b, self->end) ? -1 : 0;
}

/* writer.lines(nodes, fallback) -> str: the lines of `nodes` (a sequence), each by this writer or,
 * when it declines one, by fallback(node). */
static PyObject *writer_lines(Writer *self, PyObject *args) {
    PyObject *sequence, *fallback;
    if (!PyArg_ParseTuple(args, "OO:lines", &sequence, &fallback)) return NULL;
    PyObject *nodes = PySequence_Fast(sequence, "lines() needs a sequence of nodes");
    if (nodes == NULL) return NULL;
    Buffer b = {NULL, 0, 0};
    PyObject *pieces = NULL; /* made at the first line the fallback writes */
    PyObject *result = NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(nodes);
    for (Py_ssize_t k = 0; k < count; k++) {
        PyObject *node = PySequence_Fast_GET_ITEM(nodes, k);
        Py_ssize_t start = b.size;
        int status = write_node(self, &b, node);
        if (status < 0) goto done;
        if (status == 0) continue;
        b.size = start; /* declined: the printer's function writes this line */
        if (pieces == NULL && (pieces = PyList_New(0)) == NULL) goto done;
        PyObject *head = PyUnicode_FromStringAndSize(b.data ? b.data : "", b.size);
        if (head == NULL || PyList_Append(pieces, head) < 0) {
            Py_XDECREF(head);
            goto done;
        }
        Py_DECREF(head);
        b.size = 0;
        PyObject *line = PyObject_CallOneArg(fallback, node);
        if (line == NULL || PyList_Append(pieces, line) < 0) {
            Py_XDECREF(line);
            goto done;
        }
        Py_DECREF(line);
    }
    result = PyUnicode_FromStringAndSize(b.data ? b.data : "", b.size);
    if (result != NULL && pieces != NULL) {
        int failed = PyList_Append(pieces, result);
        Py_DECREF(result);
        result = NULL;
        if (!failed) {
            PyObject *empty = PyUnicode_FromString("");
            result = empty ? PyUnicode_Join(empty, pieces) : NULL;
            Py_XDECREF(empty);
        }
    }
done:
    Py_XDECREF(pieces);
    Py_DECREF(nodes);
    PyMem_Free(b.data);
    return result;
}

static PyMethodDef writer_methods[] = {
    {"lines", (PyCFunction)writer_lines, METH_VARARGS,
     "lines(nodes, fallback) -> str: the node lines of a list of nodes (fallback(node) for a line not written here)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject WriterType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "graphir._girtext.Writer",
    .tp_basicsize = sizeof(Writer),
    .tp_dealloc = (destructor)writer_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_methods = writer_methods,
    .tp_doc = "The printer's node lines for the commonest nodes (make_writer).",
};

/* make_writer(Node, Value, Cost, Mem, type_texts, type_text, default_kind, keys, indent, end)
 * -> a writer, or None when a class's slots are not the expected ones. `keys` names the
 * annotation keys to format here (the others make the printer's function write the line). */
static PyObject *make_writer(PyObject *module, PyObject *args) {
    PyTypeObject *node_type, *value_type, *cost_type, *mem_type;
    PyObject *type_texts, *type_text, *default_kind, *keys, *indent, *end;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!OUO!UU:make_writer", &PyType_Type, &node_type, &PyType_Type, &value_type,
                          &PyType_Type, &cost_type, &PyType_Type, &mem_type, &PyDict_Type, &type_texts, &type_text,
                          &default_kind, &PyFrozenSet_Type, &keys, &indent, &end))
        return NULL;
    if (!PyUnicode_IS_ASCII(indent) || !PyUnicode_IS_ASCII(end)) Py_RETURN_NONE;
    Writer *self = PyObject_New(Writer, &WriterType);
    if (self == NULL) return NULL;
    self->node_type = node_type;
    self->value_type = value_type;
    self->cost_type = cost_type;
    self->mem_type = mem_type;
    self->type_texts = type_texts;
    self->type_text = type_text;
    self->default_kind = default_kind;
    self->indent = indent;
    self->end = end;
    PyObject *owned[] = {(PyObject *)node_type, (PyObject *)value_type, (PyObject *)cost_type, (PyObject *)mem_type,
                         type_texts, type_text, default_kind, indent, end};
    for (size_t k = 0; k < sizeof(owned) / sizeof(owned[0]); k++) Py_INCREF(owned[k]);
    self->keys = PyDict_New();
    if (self->keys == NULL) goto fail;
    for (int r = 0; r < K_COUNT; r++) {
        PyObject *key = PyUnicode_InternFromString(KEY_NAMES[r]);
        int wanted = key ? PySet_Contains(keys, key) : -1;
        PyObject *rank = wanted > 0 ? PyLong_FromLong(r) : NULL;
        int failed = wanted < 0 || (wanted > 0 && (rank == NULL || PyDict_SetItem(self->keys, key, rank) < 0));
        Py_XDECREF(key);
        Py_XDECREF(rank);
        if (failed) goto fail;
    }
    int status = ir_slot_offsets(node_type, value_type, cost_type, mem_type, self->node_off, self->value_off,
                                 self->cost_off, self->mem_off);
    if (status < 0) goto fail;
    if (status > 0) {
        Py_DECREF(self);
        Py_RETURN_NONE;
    }
    return (PyObject *)self;
fail:
    Py_DECREF(self);
    return NULL;
}

/* format_duration(seconds) -> str or None: the writer's duration text (for tests against the
 * printer's rule); None for a value it leaves to the printer. */
static PyObject *format_duration(PyObject *module, PyObject *arg) {
    double seconds = PyFloat_AsDouble(arg);
    if (seconds == -1.0 && PyErr_Occurred()) return NULL;
    Buffer b = {NULL, 0, 0};
    int status = buffer_duration(&b, seconds);
    PyObject *result = status < 0 ? NULL : status > 0 ? Py_NewRef(Py_None) : PyUnicode_FromStringAndSize(b.data, b.size);
    PyMem_Free(b.data);
    return result;
}

/* format_bytes(count) -> str or None, as format_duration. */
static PyObject *format_bytes(PyObject *module, PyObject *arg) {
    long long count;
    int status = exact_int(arg, 0, &count);
    if (status) return status < 0 ? NULL : Py_NewRef(Py_None);
    Buffer b = {NULL, 0, 0};
    PyObject *result = buffer_bytes(&b, count) < 0 ? NULL : PyUnicode_FromStringAndSize(b.data, b.size);
    PyMem_Free(b.data);
    return result;
}

static PyMethodDef methods[] = {
    {"make_reader", make_reader, METH_VARARGS,
     "make_reader(values, node_names, nodes, seq, type_cache, make_type, source, pending, keys, controls, graph, "
     "result_kind, no_nodes, default_kind, byte_units, dtypes, Node, Value, Cost, Mem, TensorType) -> a reader, "
     "or None."},
    {"make_writer", make_writer, METH_VARARGS,
     "make_writer(Node, Value, Cost, Mem, type_texts, type_text, default_kind, keys, indent, end) -> a writer, "
     "or None."},
    {"format_duration", format_duration, METH_O, "format_duration(seconds) -> the writer's text, or None."},
    {"format_bytes", format_bytes, METH_O, "format_bytes(count) -> the writer's text, or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "graphir._girtext",
    "The .gir reader's plain-line loop for the commonest node lines, compiled (see graphir/_girtext.c).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__girtext(void) {
    if (PyType_Ready(&ReaderType) < 0 || PyType_Ready(&WriterType) < 0) return NULL;
    return PyModule_Create(&module);
}
