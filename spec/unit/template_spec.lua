-- lib/template.lua: escaping by default, raw output only when asked,
-- sections, loops, inverted sections, dotted names, partials.
local template = require "template"

local function render(text, data, partials)
  return template.render_string(text, data, partials and function(name) return partials[name] end)
end

describe("template", function()
  it("escapes values by default", function()
    assert.are.equal("<p>&lt;script&gt;&amp;&quot;&#39;</p>", render("<p>{{v}}</p>", { v = "<script>&\"'" }))
  end)

  it("writes raw values only with {{{ }}} or {{& }}", function()
    assert.are.equal("<b>x</b>|<b>x</b>", render("{{{v}}}|{{& v}}", { v = "<b>x</b>" }))
  end)

  it("renders nothing for missing and false values, and numbers as text", function()
    assert.are.equal("[][]3", render("[{{missing}}][{{no}}]{{n}}", { no = false, n = 3 }))
  end)

  it("loops over lists, with outer names still visible", function()
    local out = render("{{#items}}<li>{{name}}@{{site}}</li>{{/items}}",
      { site = "s", items = { { name = "a" }, { name = "<b>" } } })
    assert.are.equal("<li>a@s</li><li>&lt;b&gt;@s</li>", out)
  end)

  it("loops over lists of strings with {{.}}", function()
    assert.are.equal("a,b,", render("{{#l}}{{.}},{{/l}}", { l = { "a", "b" } }))
  end)

  it("shows sections for truthy values and tables, inverted ones for falsy and empty lists", function()
    local t = "{{#on}}on{{/on}}{{^on}}off{{/on}}|{{#obj}}{{x}}{{/obj}}|{{^list}}empty{{/list}}"
    assert.are.equal("on|1|empty", render(t, { on = true, obj = { x = 1 }, list = {} }))
    assert.are.equal("off||empty", render(t, { on = false }))
  end)

  it("follows dotted names", function()
    assert.are.equal("n &amp; m", render("{{a.b.c}}", { a = { b = { c = "n & m" } } }))
    assert.are.equal("", render("{{a.b.c}}", { a = { b = "x" } }))
  end)

  it("includes partials with the same data", function()
    assert.are.equal("<h1>T</h1>", render("{{> head}}", { t = "T" }, { head = "<h1>{{t}}</h1>" }))
  end)

  it("ignores comments", function()
    assert.are.equal("ab", render("a{{! not shown }}b", {}))
  end)

  it("refuses unbalanced sections", function()
    assert.has_error(function() render("{{#a}}x", {}) end)
    assert.has_error(function() render("x{{/a}}", {}) end)
    assert.has_error(function() render("{{#a}}x{{/b}}", {}) end)
    assert.has_error(function() render("{{a", {}) end)
  end)
end)
