// Json: exact round trips (int64 and doubles), unicode, strict parsing with positioned errors,
// and typed accessors whose errors name the key.
#include <gtest/gtest.h>

#include "expect_error.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "loom/core/error.h"
#include "loom/core/json.h"

namespace {

using loom::Json;

uint64_t bits_of(double d) {
  uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
}

TEST(Json, NestedRoundTripKeepsKeyOrder) {
  Json doc = Json::object({{"zeta", 1},
                           {"alpha", Json::array({1, 2.5, "three", nullptr, true, false})},
                           {"nested", Json::object({{"b", Json::object()}, {"a", Json::array()}})},
                           {"text", "quote \" backslash \\ newline \n tab \t bell \x07"}});
  for (int indent : {-1, 0, 2}) {
    const std::string text = doc.dump(indent);
    const Json back = Json::parse(text);
    EXPECT_EQ(back, doc) << text;
    EXPECT_EQ(back.dump(indent), text);  // printing is stable
    ASSERT_EQ(back.items().size(), 4u);
    EXPECT_EQ(back.items()[0].first, "zeta");  // insertion order, not sorted
    EXPECT_EQ(back.items()[1].first, "alpha");
  }
  EXPECT_EQ(doc.dump(),
            R"({"zeta":1,"alpha":[1,2.5,"three",null,true,false],"nested":{"b":{},"a":[]},)"
            R"("text":"quote \" backslash \\ newline \n tab \t bell \u0007"})");
  EXPECT_EQ(Json::object({{"a", Json::array({1})}}).dump(2), "{\n  \"a\": [\n    1\n  ]\n}");
}

TEST(Json, Int64IsExact) {
  const int64_t big = (int64_t(1) << 62) + 1;  // not representable as a double
  const Json v = Json::parse("{\"step\": 4611686018427387905}");
  EXPECT_TRUE(v.at("step").is_int());
  EXPECT_EQ(v.at("step").as_int(), big);
  EXPECT_EQ(Json(big).dump(), "4611686018427387905");
  for (int64_t i : {std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min(),
                    int64_t(0), int64_t(-1), big}) {
    EXPECT_EQ(Json::parse(Json(i).dump()).as_int(), i);
  }
  // Beyond int64 is still valid JSON, but it is a double and as_int() refuses it.
  const Json huge = Json::parse("9223372036854775808");
  EXPECT_TRUE(huge.is_double());
  expect_error([&] { huge.as_int(); }, {"non-integer number", "expected an integer"});
  expect_error([] { Json(uint64_t(1) << 63); }, {"does not fit int64"});
  EXPECT_EQ(Json(uint64_t(7)).as_int(), 7);
}

TEST(Json, DoublesRoundTripExactly) {
  std::vector<double> values = {
      0.1,  1.0 / 3.0, 1e-300, 5e-324, 2.2250738585072014e-308, std::numeric_limits<double>::max(),
      -0.0, 1.0,       -2.0,   1e22,   123456789.123456789,     3e-4};
  uint64_t state = 0x9e3779b97f4a7c15ull;  // random bit patterns, all exponents
  for (int i = 0; i < 2000; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    double d;
    std::memcpy(&d, &state, 8);
    if (std::isfinite(d)) values.push_back(d);
  }
  for (double d : values) {
    const std::string text = Json(d).dump();
    const Json back = Json::parse(text);
    ASSERT_TRUE(back.is_double()) << text;  // "1.0", never "1"
    EXPECT_EQ(bits_of(back.as_double()), bits_of(d)) << text;
  }
  EXPECT_EQ(Json(1.0).dump(), "1.0");
  EXPECT_EQ(Json(0.1).dump(), "0.1");                 // shortest form, not 0.10000000000000001
  EXPECT_EQ(Json::parse("1e-400").as_double(), 0.0);  // underflow is not an error
  expect_error([] { Json::parse("1e400"); }, {"line 1, column 1", "range of a double"});
}

TEST(Json, NonFiniteDoublesAreAnError) {
  Json doc = Json::object({{"loss", std::nan("")}});
  expect_error([&] { doc.dump(); }, {"key 'loss'", "JSON cannot represent"});
  expect_error([] { Json(std::numeric_limits<double>::infinity()).dump(); }, {"inf"});
}

TEST(Json, UnicodeEscapesAndUtf8) {
  // \u00e9 is é; the surrogate pair is U+1F600.
  const Json v = Json::parse(R"(["\u00e9\ud83d\ude00\u0041\/", "raw é😀"])");
  EXPECT_EQ(v.at(0).as_string(),
            "\xc3\xa9\xf0\x9f\x98\x80"
            "A/");
  EXPECT_EQ(v.at(1).as_string(), "raw \xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_EQ(Json::parse(v.dump()), v);
  EXPECT_EQ(Json(std::string("\x01\x1f")).dump(), R"("\u0001\u001f")");
  expect_error([] { Json::parse(R"("\ude00")"); }, {"column 2", "high surrogate"});
  expect_error([] { Json::parse(R"("\ud83d x")"); }, {"low surrogate"});
  expect_error([] { Json::parse(R"("\u12G4")"); }, {"4 hex digits"});
  expect_error([] { Json::parse("\"\xff\""); }, {"valid UTF-8", "byte 0xff"});
  expect_error([] { Json::parse("\"\xc0\xaf\""); }, {"valid UTF-8"});      // overlong '/'
  expect_error([] { Json::parse("\"\xed\xa0\x80\""); }, {"valid UTF-8"});  // encoded surrogate
  expect_error([] { Json::parse("\"a\tb\""); }, {"column 3", "control characters"});
}

TEST(Json, ParseErrorsGiveLineColumnAndExpectation) {
  expect_error([] { Json::parse(""); }, {"line 1, column 1", "expected a value", "end of input"});
  expect_error([] { Json::parse("{\"a\": 1,}"); },
               {"line 1, column 9", "a string key after ','", "got '}'"});
  expect_error([] { Json::parse("{\n  \"a\": tru\n}"); },
               {"line 2, column 8", "expected 'true', got 'tru'"});
  expect_error([] { Json::parse("[1 2]"); }, {"line 1, column 4", "',' or ']'"});
  expect_error([] { Json::parse("{\"a\" 1}"); }, {"column 6", "':' after key 'a'"});
  expect_error([] { Json::parse("{\"a\": 1 \"b\": 2}"); },
               {"column 9", "',' or '}' after the value of key 'a'"});
  expect_error([] { Json::parse("{\"a\":1} x"); }, {"column 9", "end of input after"});
  expect_error([] { Json::parse("{\"a\":1,\n\"a\":2}"); }, {"line 2, column 1", "duplicate"});
  expect_error([] { Json::parse("\"abc"); }, {"column 1", "closing '\"'"});
  expect_error([] { Json::parse("[01]"); }, {"column 3", "',' or ']'"});
  expect_error([] { Json::parse("-"); }, {"column 2", "a digit"});
  expect_error([] { Json::parse("1."); }, {"a digit after '.'"});
  expect_error([] { Json::parse("[1,]"); }, {"column 4", "a value"});
  expect_error([] { Json::parse("// no comments\n1"); }, {"column 1", "a value"});
  expect_error([] { Json::parse(std::string(600, '[') + std::string(600, ']')); },
               {"levels of nesting"});
  EXPECT_NO_THROW(Json::parse(std::string(500, '[') + std::string(500, ']')));
  EXPECT_EQ(Json::parse(" \r\n\t{ \"a\" : [ ] } \n").dump(), "{\"a\":[]}");
}

TEST(Json, TypedAccessorsNameTheKey) {
  const Json state = Json::parse(R"({"step": "10", "shape": [1, "x"], "opt": {"lr": 1}})");
  expect_error([&] { state.at("step").as_int(); },
               {"json: key 'step' is a string, expected an integer"});
  expect_error([&] { state.at("shape").at(1).as_int(); }, {"key 'shape[1]' is a string"});
  expect_error([&] { state.at("opt").at("lr").as_string(); },
               {"key 'lr' is an integer, expected a string"});
  expect_error([&] { state.at("epoch"); }, {"missing key 'epoch'", "'step', 'shape', 'opt'"});
  expect_error([&] { state.at("shape").at(5); }, {"index 5", "key 'shape'", "2 elements"});
  expect_error([&] { state.at("step").at("x"); }, {"key 'step' is a string, expected an object"});
  expect_error([] { Json::parse("[true]").at(0).as_double(); },
               {"is a boolean, expected a number"});
  const Json built = Json::object({{"shape", Json::array({1, "x"})}});
  expect_error([&] { built.at("shape").at(1).as_int(); }, {"key 'shape[1]' is a string"});
  EXPECT_EQ(state.at("opt").at("lr").as_double(), 1.0);  // integers widen to double
  EXPECT_EQ(state.find("missing"), nullptr);
  EXPECT_TRUE(state.contains("opt"));
}

TEST(Json, BuildingKeepsOrderAndReplacesInPlace) {
  Json j;  // null becomes an object on the first set
  j.set("b", 1);
  j.set("a", 2);
  j.set("b", "three");
  EXPECT_EQ(j.dump(), R"({"b":"three","a":2})");
  Json list;
  list.push_back(1);
  list.push_back(Json::object({{"k", false}}));
  EXPECT_EQ(list.dump(), R"([1,{"k":false}])");
  expect_error([] { Json::object({{"k", 1}, {"k", 2}}); }, {"key 'k' given twice"});
  // Member order does not matter for equality; types do.
  EXPECT_EQ(Json::parse(R"({"a":1,"b":2})"), Json::parse(R"({"b":2,"a":1})"));
  EXPECT_NE(Json::parse("1"), Json::parse("1.0"));
}

}  // namespace
